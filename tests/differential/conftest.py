"""Differential tests: latsim's scheduler against vLLM 0.25.1's own, through the bridge.

The tests in this directory run in latsim's own environment (``python -m pytest``). vLLM runs
in the separate reference python (``.ci/vllm-ref.sh``), reached through
``latsim.oracle.differential.oracle_records``: the oracle fixture sends the cases of every
selected test in ONE batch. Without a reference python the tests are skipped, unless
``LATSIM_REQUIRE_VLLM_REF=1`` (CI), where they fail.

``oracle/`` holds the smoke tests of the oracle adapter itself, which import vLLM directly; they
are collected only where vLLM is importable or when that directory is named on the command line
(``"$(bash .ci/vllm-ref.sh)" -m pytest tests/differential/oracle``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

_ORACLE_DIR = Path(__file__).resolve().parent / "oracle"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "oracle_cases(*families): case families a test reads from the oracle fixture")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.resolve() != _ORACLE_DIR or importlib.util.find_spec("vllm") is not None:
        return None
    root = config.invocation_params.dir
    named = any(_ORACLE_DIR in [p, *p.parents] for p in (Path(root, a.split("::")[0]).resolve() for a in config.args))
    return None if named else True


def require_reference_python():
    """The reference python, or skip (fail under ``LATSIM_REQUIRE_VLLM_REF=1``) without one."""
    from latsim.oracle.differential import reference_python

    python = reference_python()
    if python is not None and python.exists():
        return python
    reason = (
        f"no vLLM reference python ({python or 'none of $LATSIM_VLLM_REF_PYTHON, /work/vllm-ref, ~/.cache/latsim'}"
        "); build it with LATSIM_VLLM_REF_PYTHON=$(bash .ci/vllm-ref.sh)"
    )
    if os.environ.get("LATSIM_REQUIRE_VLLM_REF") == "1":
        pytest.fail(f"LATSIM_REQUIRE_VLLM_REF=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def oracle(request: pytest.FixtureRequest):
    """``oracle(family) -> (cases, vLLM records per case, vLLM seconds per case)``.

    On first use, the cases of every family named by an ``oracle_cases`` marker among the
    selected tests go to the reference python in one batch.
    """
    from latsim.oracle.differential import oracle_run
    from tests.differential.streams import FAMILIES

    python = require_reference_python()
    wanted: list[str] = []
    for item in request.session.items:
        for mark in item.iter_markers("oracle_cases"):
            wanted += [f for f in mark.args if f not in wanted]
    cases = {name: FAMILIES[name]() for name in wanted}
    runs = iter(oracle_run([c for name in wanted for c in cases[name]], python=python))
    results = {}
    for name, cs in cases.items():
        got = [next(runs) for _ in cs]
        results[name] = (cs, [records for records, _ in got], sum(seconds for _, seconds in got))

    def get(family: str):
        if family not in results:
            raise KeyError(f"family {family!r} is not named by an oracle_cases marker of a selected test")
        return results[family]

    return get
