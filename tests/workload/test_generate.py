"""synthesize(): shape, determinism (also across processes), common random numbers, errors."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from latsim.workload.arrivals import Gamma
from latsim.workload.generate import synthesize
from latsim.workload.lengths import Uniform
from latsim.workload.trace import RequestTrace

LOGNORMAL = "lognormal:median=600,sigma=0.8,min=16,max=4096"


def digest(trace: RequestTrace) -> str:
    h = hashlib.sha256()
    for a in (trace.arrival_s, trace.input_tokens, trace.output_tokens):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def test_trace_has_requested_shape_and_rate() -> None:
    trace = synthesize(5.0, 20_000, "poisson", LOGNORMAL, "uniform:min=1,max=512", np.random.default_rng(0))
    assert len(trace) == 20_000 and trace.arrival_s[0] == 0.0
    assert trace.duration_s / (len(trace) - 1) == pytest.approx(0.2, rel=0.03)
    assert trace.input_tokens.min() >= 16 and trace.input_tokens.max() <= 4096
    assert trace.output_tokens.dtype == np.int64 and trace.output_tokens.max() <= 512
    assert trace.prefix_group is None


def test_same_seed_same_trace_different_seed_different_trace() -> None:
    a = synthesize(2.0, 300, "gamma:cv=2", LOGNORMAL, 128, np.random.default_rng(7))
    b = synthesize(2.0, 300, "gamma:cv=2", LOGNORMAL, 128, np.random.default_rng(7))
    c = synthesize(2.0, 300, "gamma:cv=2", LOGNORMAL, 128, np.random.default_rng(8))
    assert digest(a) == digest(b) != digest(c)


def test_two_calls_on_one_generator_differ() -> None:
    rng = np.random.default_rng(7)
    assert digest(synthesize(1.0, 50, "poisson", LOGNORMAL, 8, rng)) != digest(
        synthesize(1.0, 50, "poisson", LOGNORMAL, 8, rng)
    )


def test_same_seed_same_trace_in_another_process() -> None:
    code = (
        "import hashlib, numpy as np\n"
        "from latsim.workload.generate import synthesize\n"
        f"t = synthesize(3.0, 200, 'gamma:cv=1.5', {LOGNORMAL!r}, 'choice:8,64', np.random.default_rng(11))\n"
        "h = hashlib.sha256()\n"
        "for a in (t.arrival_s, t.input_tokens, t.output_tokens):\n"
        "    h.update(np.ascontiguousarray(a).tobytes())\n"
        "print(h.hexdigest())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", code]
    out = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, check=True)
    here = synthesize(3.0, 200, "gamma:cv=1.5", LOGNORMAL, "choice:8,64", np.random.default_rng(11))
    assert out.stdout.strip() == digest(here)


def test_changing_qps_or_arrivals_keeps_lengths() -> None:
    slow = synthesize(1.0, 500, "poisson", LOGNORMAL, LOGNORMAL, np.random.default_rng(3))
    fast = synthesize(4.0, 500, "poisson", LOGNORMAL, LOGNORMAL, np.random.default_rng(3))
    other = synthesize(4.0, 500, "constant", LOGNORMAL, LOGNORMAL, np.random.default_rng(3))
    np.testing.assert_array_equal(slow.input_tokens, fast.input_tokens)
    np.testing.assert_array_equal(slow.output_tokens, other.output_tokens)
    np.testing.assert_allclose(fast.arrival_s, slow.arrival_s / 4.0, rtol=1e-12)


def test_accepts_objects_and_burst_ignores_qps() -> None:
    trace = synthesize(1e-6, 10, "burst", Uniform(1, 2), 3, np.random.default_rng(0))
    np.testing.assert_array_equal(trace.arrival_s, np.zeros(10))
    gamma = synthesize(1.0, 10, Gamma(cv=0.5), Uniform(1, 2), 3, np.random.default_rng(0))
    assert len(gamma) == 10


def test_zero_requests_gives_empty_trace() -> None:
    assert len(synthesize(1.0, 0, "poisson", 10, 10, np.random.default_rng(0))) == 0


@pytest.mark.parametrize("qps", [0, -2.0, float("nan"), float("inf")])
def test_qps_must_be_positive(qps: float) -> None:
    with pytest.raises(ValueError, match=r"qps must be a finite number > 0"):
        synthesize(qps, 10, "burst", 10, 10, np.random.default_rng(0))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"number of requests must be an integer >= 0, got 2\.5"):
        synthesize(1.0, 2.5, "poisson", 10, 10, np.random.default_rng(0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"rng must be a numpy\.random\.Generator, got int"):
        synthesize(1.0, 2, "poisson", 10, 10, 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown arrival process 'pareto'"):
        synthesize(1.0, 2, "pareto", 10, 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="lognormal: sigma must be > 0"):
        synthesize(1.0, 2, "poisson", "lognormal:median=5,sigma=0", 10, np.random.default_rng(0))
