"""A shared expert on vLLM's second CUDA stream: priced beside the routed experts up to 256 tokens
on NVIDIA GPUs, alone above and elsewhere, and checked against the H100's traced blocks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from latsim import load_device
from latsim.catalog.lookup import load_model
from latsim.costmodel.profile.regressors import load_predictors
from latsim.costmodel.profile.tabulate import (
    SHARED_STREAM_TOKENS,
    per_token,
    shared_beside_s,
    shared_expert_s,
    shared_in_step_s,
    shared_stream_summary,
)
from latsim.costmodel.shard import shard_model
from latsim.paths import CALIBRATION
from tests.script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "data" / "traces" / "h100" / "s53"


@pytest.fixture(scope="module")
def h100():
    return load_predictors(CALIBRATION / "h100")


@pytest.fixture(scope="module")
def shared_overlap():
    return load_script(Path("shared_overlap.py"))


@pytest.fixture(scope="module")
def qwen15():
    return shard_model(load_model("qwen1.5-moe-a2.7b"), 1, "bf16")


def test_beside_the_routed_experts_below_the_threshold_alone_above(h100, qwen15) -> None:
    device = load_device("h100")
    t = np.array([1.0, 8.0, 64.0, 255.0, 256.0, 257.0, 512.0, 4096.0])
    got = shared_in_step_s(h100, qwen15, t, device)
    alone = shared_expert_s(h100, qwen15, t, device)
    beside = shared_beside_s(qwen15, t, device)
    under = t <= SHARED_STREAM_TOKENS
    assert np.allclose(got[under], np.minimum(alone, beside)[under])
    assert np.allclose(got[~under], alone[~under])
    assert (got <= alone + 1e-15).all()
    assert (got[:3] < 0.8 * alone[:3]).all()  # few tokens: the shared path's latency is hidden
    # the step past the threshold pays the whole shared path again
    assert got[5] - got[4] > 0.5 * (alone[4] - got[4])


def test_beside_is_the_shared_paths_bytes_at_the_bandwidth_plus_its_flops_at_the_peak(qwen15) -> None:
    device = load_device("h200")
    h, w, layers = qwen15.hidden, qwen15.shared_width, qwen15.moe_layers
    weights = 3.0 * h * w  # gate and up, down
    for t in (1.0, 100.0):
        nbytes = 2.0 * (weights + h) + 2.0 * t * (5 * h + 6 * w)
        flops = 2.0 * t * (weights + h)
        want = layers * (nbytes / device.hbm_bandwidth + flops / device.flops_for("bf16"))
        assert shared_beside_s(qwen15, np.array([t]), device)[0] == pytest.approx(want, rel=1e-12)
    # an FP8 checkpoint's shared expert reads half the weight bytes and runs at the FP8 peak
    fp8 = shard_model(load_model("qwen1.5-moe-a2.7b"), 1, "fp8")
    assert shared_beside_s(fp8, np.array([1.0]), device)[0] < 0.6 * shared_beside_s(qwen15, np.array([1.0]), device)[0]


def test_no_second_stream_on_rocm_and_nothing_without_a_shared_expert(h100, qwen15) -> None:
    t = np.array([8.0])
    mi300x = load_device("mi300x")
    assert shared_in_step_s(h100, qwen15, t, mi300x)[0] == pytest.approx(shared_expert_s(h100, qwen15, t, mi300x)[0])
    assert str(shared_stream_summary(qwen15, mi300x)["priced"]).startswith("alone")
    dense = shard_model(load_model("qwen3-30b-a3b"), 1, "bf16")
    assert shared_in_step_s(h100, dense, t, load_device("h100"))[0] == 0.0
    assert shared_expert_s(h100, replace(qwen15, shared_width=0), t, load_device("h100"))[0] == 0.0


def test_the_step_drops_what_the_second_stream_hides(h100, qwen15) -> None:
    """per_token differs from the one-stream sum by exactly the shared path's hidden part."""
    device = load_device("h100")
    t = np.array([16.0, 1024.0])
    step, _ = per_token(h100, qwen15, device, t)
    bare, _ = per_token(h100, replace(qwen15, shared_width=0), device, t)
    alone = shared_expert_s(h100, qwen15, t, device)
    assert step[1] - bare[1] == pytest.approx(alone[1], rel=1e-9)
    assert step[0] - bare[0] == pytest.approx(shared_beside_s(qwen15, t, device)[0], rel=1e-9)


def test_the_traced_blocks_bound_the_price(shared_overlap) -> None:
    """The H100's traces (scripts/shared_overlap.py): what the shared path added beside the routed
    one lies below the model's upper bound and above the weights' bytes at 70 % of the bandwidth;
    the second stream saved at least a third of the shared path's one-stream wall up to 128 tokens."""
    rows = shared_overlap.compare(TRACES / "serial-qwen1.5-moe-a2.7b", TRACES / "overlap-qwen1.5-moe-a2.7b", "h100")
    assert [r["seqs"] for r in rows] == [8, 32, 64, 128, 256]
    s = shard_model(load_model("qwen1.5-moe-a2.7b"), 1, "bf16")
    weights_us = 3.0 * s.hidden * s.shared_width * 2.0 / load_device("h100").hbm_bandwidth * 1e6
    for r in rows:
        assert 0.7 * weights_us < r["extra"] <= r["model_extra"] * 1.02
        if r["seqs"] <= 128:
            assert r["saving"] > r["shared_alone"] / 3


def test_the_cost_model_says_how_it_priced_the_shared_expert() -> None:
    from latsim.costmodel.calibrated import load_calibrated

    qwen, dense = load_model("qwen1.5-moe-a2.7b"), load_model("llama-3.1-8b")
    said = load_calibrated(qwen, load_device("h100")).describe()["shared_experts"]
    assert isinstance(said, dict) and said["second_stream_tokens"] == SHARED_STREAM_TOKENS
    assert load_calibrated(dense, load_device("h100")).describe()["shared_experts"] is None


def _kernel(name: str, ts: float, dur: float, tid: int = 7) -> dict:
    return {"name": name, "ts": ts, "dur": dur, "tid": tid, "cat": "kernel"}


def test_a_layers_block_is_read_from_the_router_to_the_next_norm(shared_overlap) -> None:
    """scripts/shared_overlap.py's reading of one MoE layer, one stream and two."""
    head = [_kernel("triton_red_fused_add_rms_norm_0", 0, 2), _kernel("triton_poi_fused_mm_t_1", 3, 1),
            _kernel("nvjet_router", 5, 5)]
    tail = [_kernel("triton_red_fused_add_fused_add_rms_norm_2", 200, 3)]
    serial = [*head, _kernel("nvjet_shared_gate_up", 10, 20), _kernel("triton_poi_fused_mul_silu", 30, 2),
              _kernel("nvjet_shared_down", 32, 10), _kernel("moeSoftmax", 45, 2), _kernel("moeTopK", 47, 3),
              _kernel("fused_moe_kernel", 50, 100), _kernel("moe_sum_vec_kernel", 150, 2), *tail]
    (one,) = shared_overlap.layer_blocks(serial)
    assert one["wall"] == 190 and one["shared_wall"] == 35 and one["routed_wall"] == 155
    assert (one["shared"], one["routing"], one["experts"], one["aux"]) == (32, 5, 102, 0)
    overlap = [*head, _kernel("moeSoftmax", 10, 2), _kernel("nvjet_shared_gate_up", 11, 20, tid=99),
               _kernel("moeTopK", 12, 6), _kernel("fused_moe_kernel", 18, 110),
               _kernel("nvjet_shared_down", 31, 10, tid=99), _kernel("moe_sum_vec_kernel", 128, 2), *tail]
    (two,) = shared_overlap.layer_blocks(overlap)
    assert two["wall"] == 190 and two["aux"] == 30 and two["shared"] == 0 and two["routing"] == 8
    assert two["shared_wall"] != two["shared_wall"]  # nan: no one-stream shared path to time
