"""Smoke tests of the vLLM oracle itself: they import vLLM, so they run under the reference python.

Every test collected below this directory is marked ``vllm_ref``. Run them with the python of
``.ci/vllm-ref.sh``: ``"$(bash .ci/vllm-ref.sh)" -m pytest tests/differential/oracle`` (the
main-venv test ``tests/differential/test_against_vllm.py::test_oracle_smoke_suite`` does exactly
that). They are never skipped for a missing vLLM: a reference run without vLLM must fail
loudly. A plain ``python -m pytest`` in an environment without vLLM does not collect this
directory (``tests/differential/conftest.py``) unless it is named on the command line.

The reference environment has vLLM, torch and numpy but none of latsim's own dependencies, so
these tests import only pure-Python latsim modules (``latsim.oracle.steprecord``,
``latsim.oracle.vllm_exact``); the repository root is put on ``sys.path`` because latsim is
not installed there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_REPO_ROOT = Path(__file__).resolve().parents[3]
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.vllm_ref)


@pytest.fixture(scope="session")
def run_vllm():
    """``run_vllm_scheduler`` itself: a test reads like a call of the adapter."""
    from latsim.oracle.vllm_exact import run_vllm_scheduler

    return run_vllm_scheduler
