"""fit_host recovers host terms that generated the "measurements" and keeps fixed ones fixed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from latsim.catalog.lookup import load_device, load_model
from latsim.costmodel.factory import gpu_cost_model
from latsim.costmodel.host import HostOverhead
from latsim.deployment import Deployment
from latsim.validate.fit_host import Replay, _percentiles, errors, fit_host, predict
from latsim.workload.generate import synthesize

TRUTH = HostOverhead(step_s=1.5e-3, seq_s=4e-5, frontend_s=5e-3, gpu_scale=1.3, eager_layer_s=2e-4)


@pytest.fixture(scope="module")
def replay() -> Replay:
    dep = Deployment(model=load_model("llama-3.1-8b"), device=load_device("h200"))
    trace = synthesize(qps=20, num_requests=150, arrival="poisson", input_dist=600, output_dist=40,
                       rng=np.random.default_rng(3))
    gpu = gpu_cost_model(dep.model, dep.device, 1, "bf16", "bf16", "roofline")
    blank = Replay("synthetic", dep, trace, gpu, np.ones(4))
    return replace(blank, measured=_percentiles(predict(blank, TRUTH)))


def test_recovers_the_gpu_scale_with_the_other_terms_fixed(replay: Replay) -> None:
    start = replace(TRUTH, gpu_scale=1.0)
    fitted, loss = fit_host([replay], start, free=("gpu_scale",))
    assert fitted.gpu_scale == pytest.approx(1.3, rel=0.03)
    assert (fitted.step_s, fitted.seq_s, fitted.eager_layer_s) == (TRUTH.step_s, TRUTH.seq_s, TRUTH.eager_layer_s)
    assert fitted.launch_layer_s == TRUTH.launch_layer_s == 0.0  # a held term at 0 stays 0 (off)
    assert loss < 0.02 and np.abs(errors(replay, fitted)).max() < 0.05


def test_unknown_free_term_is_rejected(replay: Replay) -> None:
    with pytest.raises(ValueError, match="free="):
        fit_host([replay], TRUTH, free=("warp_speed",))


def test_a_run_on_a_slow_host_gives_terms_in_the_reference_hosts_units(replay: Replay) -> None:
    """Measured at host speed 0.5 and replayed at it, the fit returns the front end of the
    reference host (the terms' units), not the twice-as-long one the slow host showed."""
    dep = replay.deployment
    slow = replace(replay, deployment=replace(dep, engine=replace(dep.engine, host_speed=0.5)))
    slow = replace(slow, measured=_percentiles(predict(slow, TRUTH)))
    fitted, _ = fit_host([slow], replace(TRUTH, frontend_s=2e-3), free=("frontend_s",))
    assert fitted.frontend_s == pytest.approx(TRUTH.frontend_s, rel=0.05)
