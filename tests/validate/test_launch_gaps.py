"""scripts/launch_gaps.py: a step's output chunks of 128 tokens are one emission."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latsim.measure.records import RequestRecord, write_run
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


def test_a_steps_tokens_are_its_prompts_new_tokens_and_its_decoders() -> None:
    lg = load_script(Path("launch_gaps.py"))
    counts = np.array([10, 40, 41, 40])          # tokens of each emission
    carrier = np.array([1, 2, 2, 3])             # the emission carrying each request's first token
    new_tokens = np.array([600.0, 200.0, 100.0, 300.0])
    tokens = lg.step_tokens(carrier, new_tokens, counts)
    # emission 1: one prompt of 600 beside 39 decoders; 2: two prompts (300) beside 39; 3: 300 + 39
    assert tokens.tolist() == [639.0, 339.0, 339.0, 339.0]


def test_a_gap_before_a_graph_step_is_no_launch(tmp_path: Path) -> None:
    """Only a step past the CUDA-graph limit is launched kernel by kernel: a prompt small enough
    to replay a graph beside its decoders is left out however long the gap before it."""
    lg = load_script(Path("launch_gaps.py"))
    assert lg.graph_limit({"engine_config": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}}) == 512
    assert lg.graph_limit({}) == 512
    assert lg.graph_limit({"engine_config": {"max_num_seqs": 64, "max_num_batched_tokens": 8192}}) == 128
    decoder = (0.000, 0.005, 0.010, 0.030, 0.035, 0.040, 0.060, 0.065)   # held gaps before 0.030 and 0.060
    records = [RequestRecord("d", 0.0, 0.0, 100, 8, 8, 0.0, decoder, None, 0.065, "ok"),
               RequestRecord("big", 0.0, 0.0, 900, 1, 1, 0.035, (0.035,), None, 0.035, "ok"),
               RequestRecord("small", 0.0, 0.0, 200, 1, 1, 0.065, (0.065,), None, 0.065, "ok")]
    meta = {"driver": "synthetic", "engine_config": {"tp": 1, "max_num_seqs": 1024, "max_num_batched_tokens": 8192},
            "model": {"config": {"num_hidden_layers": 2}}}
    run = write_run(tmp_path / "run", records, meta)
    launch, _, seqs, layers = lg.gaps(run)
    assert layers == 2 and launch.round(3).tolist() == [0.02] and seqs.tolist() == [2]
