"""scripts/launch_gaps.py: a step's output chunks of 128 tokens are one emission."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.script_module import load_script


def test_a_step_sent_in_chunks_of_128_is_one_emission() -> None:
    lg = load_script(Path("launch_gaps.py"))
    step_a = 0.010 + np.arange(128) * 5e-6                     # 128 tokens ...
    step_a = np.r_[step_a, 0.0118 + np.arange(72) * 5e-6]      # ... then 72 more 1.1 ms later
    step_b = 0.030 + np.arange(128) * 5e-6                     # 128 tokens, next step 20 ms later
    step_c = 0.0305 + 0.0025 + np.arange(10) * 5e-6            # 2.5 ms after b's last token: merged
    step_d = 0.060 + np.arange(128) * 5e-6
    step_e = 0.060 + 0.00064 + 0.004 + np.arange(5) * 5e-6     # 4 ms after: a step of its own
    times = np.sort(np.r_[step_a, step_b, step_c, step_d, step_e])
    starts, counts = lg.split_emissions(times)
    assert counts.tolist() == [200, 138, 128, 5]
    assert starts.tolist() == [0.010, 0.030, 0.060, step_e[0]]
    plain = np.r_[0.0, 0.001, 0.003]                           # parts of other sizes never merge
    assert lg.split_emissions(plain)[1].tolist() == [1, 1, 1]


def test_a_first_token_late_in_its_emission_is_carried_by_that_emission() -> None:
    """Near capacity a step's outputs reach the client over a millisecond or more and a new
    request's first token comes last: it belongs to the emission it trails, not the next one."""
    lg = load_script(Path("launch_gaps.py"))
    steps = [0.000, 0.020, 0.027]                               # a held gap (20 ms), then a normal step
    times = np.sort(np.concatenate([s + np.arange(80) * 15e-6 for s in steps]))   # 1.2 ms per emission
    starts, _ = lg.split_emissions(times)
    first_tokens = np.array([times[159], times[80], times[-1]])  # last of the 2nd, first of the 2nd, last
    assert lg.carrying_emission(starts, first_tokens).tolist() == [1, 1, 2]


@pytest.mark.parametrize("meta", [{"engine_config": {"tp": 2}},
                                  {"engine_config": {"tp": 1}, "engine_args": {"distributed_executor_backend": "mp"}}])
def test_a_run_whose_model_ran_in_worker_processes_is_refused(meta) -> None:
    lg = load_script(Path("launch_gaps.py"))
    with pytest.raises(SystemExit, match="worker processes"):
        lg.check_engine_core(meta, Path("run"))
    lg.check_engine_core({"engine_config": {"tp": 1}}, Path("run"))  # the engine core: measured
