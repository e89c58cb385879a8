"""The calibrated cost model: protocol, bitwise decode runs, tabulation error, transfer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from latsim.catalog import load_device, load_model
from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.batch import BatchShape, StepPricer
from latsim.costmodel.calibrated import CalibratedCostModel, FixedCosts, load_calibrated
from latsim.costmodel.profile.interp import bilinear
from latsim.costmodel.profile.regressors import Predictors, load_predictors
from latsim.costmodel.profile.store import has_profile
from latsim.costmodel.profile.tabulate import T_KNOTS, build_tables, decode_grid, heads_of, per_token
from latsim.costmodel.shard import shard_model

CASES = [("llama-3.1-8b", 1), ("qwen3-30b-a3b", 2), ("gemma-2-9b", 1), ("llama-3.1-70b", 4)]


@pytest.fixture(scope="module")
def models(fitted_profile: Path) -> dict[str, CalibratedCostModel]:
    h200 = load_device("h200")
    return {name: load_calibrated(load_model(name), h200, tp=tp, profile=fitted_profile) for name, tp in CASES}


def test_implements_protocol(models: dict[str, CalibratedCostModel]) -> None:
    cm: StepPricer = models["llama-3.1-8b"]
    assert cm.kind == "calibrated"
    d = cm.describe()
    assert d["source"]["gpu_name"] == "NVIDIA H200" and d["model"] == "llama-3.1-8b"
    assert cm.step_time(BatchShape()) == 0.0


@pytest.mark.parametrize("name", [c[0] for c in CASES])
@pytest.mark.parametrize(("seqs", "kv"), [(1, 17), (37, 5000), (256, 300_000), (900, 4_000_000)])
def test_decode_run_is_bitwise_step_time(models: dict[str, CalibratedCostModel], name: str, seqs: int, kv: int) -> None:
    cm = models[name]
    run = cm.decode_run(seqs, kv, 60)
    steps = [cm.step_time(BatchShape(decode_seqs=seqs, decode_kv_tokens=kv + i * seqs)) for i in range(60)]
    assert run.tolist() == steps


def test_decode_run_edge_cases(models: dict[str, CalibratedCostModel]) -> None:
    cm = models["llama-3.1-8b"]
    assert cm.decode_run(0, 0, 3).tolist() == [0.0, 0.0, 0.0]
    assert cm.decode_run(4, 100, 0).shape == (0,)
    with pytest.raises(ValueError, match="steps=-1"):
        cm.decode_run(1, 1, -1)


def test_times_grow_with_work(models: dict[str, CalibratedCostModel]) -> None:
    cm = models["llama-3.1-8b"]
    short = cm.step_time(BatchShape(decode_seqs=8, decode_kv_tokens=8 * 500))
    long = cm.step_time(BatchShape(decode_seqs=8, decode_kv_tokens=8 * 50_000))
    big = cm.step_time(BatchShape.from_chunks([(8192, 0)], []))
    assert 0 < short < long < big
    mixed = cm.step_time(BatchShape.from_chunks([(1000, 3000)], [500] * 32))
    assert mixed > cm.step_time(BatchShape.from_chunks([(1000, 3000)], []))


def test_tabulation_matches_regressors(fitted_profile: Path) -> None:
    """Interpolated tables vs direct regressor predictions off the knots (documented resolution)."""
    pred, dev, model = load_predictors(fitted_profile), load_device("h200"), load_model("llama-3.1-8b")
    s = shard_model(model, 1)
    rng = np.random.default_rng(0)
    t = np.unique(np.round(np.exp(rng.uniform(0, np.log(16384), 200))))
    table, _ = per_token(pred, s, dev, np.asarray(T_KNOTS))
    direct, _ = per_token(pred, s, dev, t)
    rel = np.abs(np.interp(t, T_KNOTS, table) - direct) / direct
    assert np.median(rel) < 0.005 and rel.max() < 0.05
    grid = decode_grid(pred, s, dev, heads_of(s, model.head_dim))
    cm = load_calibrated(model, dev, profile=fitted_profile)
    d, c = 48, 3000.0
    exact = pred.attn_decode_s(np.array([float(d)]), np.array([c]), heads_of(s, model.head_dim), 2.0, dev)[0]
    approx = cm._decode(d, d * c, 0.0) / s.layers
    assert grid.shape == (len(cm.tables.d_knots), len(cm.tables.c_knots))
    assert abs(approx - exact) / exact < 0.05


def test_transferred_kind_says_lower_confidence(fitted_profile: Path) -> None:
    cm = load_calibrated(load_model("llama-3.1-8b"), load_device("h100"), profile=fitted_profile, kind="transferred")
    assert cm.kind == "transferred"
    assert "lower" in str(cm.describe()["confidence"])
    h200 = load_calibrated(load_model("llama-3.1-8b"), load_device("h200"), profile=fitted_profile)
    b = BatchShape(decode_seqs=16, decode_kv_tokens=16 * 1000)
    assert cm.step_time(b) > h200.step_time(b)  # H100 has less memory bandwidth


def test_attention_is_the_part_of_the_price_that_moves_with_context(models: dict[str, CalibratedCostModel]) -> None:
    cm = models["llama-3.1-8b"]
    assert cm.attention_s(BatchShape()) == 0.0
    shapes = [BatchShape.from_chunks([(2048, ctx)], [ctx + 500] * 16) for ctx in (0, 4096, 16384)]
    attention = [cm.attention_s(s) for s in shapes]
    rest = [cm.step_time(s) - a for s, a in zip(shapes, attention, strict=True)]
    assert 0.0 < attention[0] < attention[1] < attention[2]
    assert rest[0] == pytest.approx(rest[1]) == pytest.approx(rest[2])  # GEMMs and the rest do not see context
    assert 0.0 < rest[0] < cm.step_time(shapes[0])


def test_only_a_mixture_of_experts_prices_padded_graph_tokens(models: dict[str, CalibratedCostModel]) -> None:
    """The routed experts of a step replayed at a larger captured size: their price at the
    padded size less at the step's own (more tokens reach more experts); nothing for a dense
    model, for no padding, or for an empty step."""
    moe, dense = models["qwen3-30b-a3b"], models["llama-3.1-8b"]
    assert moe.tables.moe_per_token and not dense.tables.moe_per_token
    assert dense.moe_pad_s(5, 8) == 0.0
    assert moe.moe_pad_s(8, 8) == 0.0 and moe.moe_pad_s(0, 8) == 0.0
    assert 0.0 < moe.moe_pad_s(5, 8) < moe.moe_pad_s(5, 16)
    assert moe.moe_pad_s(5, 8) < moe.step_time(BatchShape(decode_seqs=8, decode_kv_tokens=8000))


def test_a_measured_expert_shape_is_priced_at_its_own_rows() -> None:
    """On the profile's own GPU, an expert shape the profile timed is priced at its rows less the
    timer's floor, as the regressor's rows are (log-log between measured token counts, never a
    step of the regressor's trees between them); another GPU keeps the regressor's transfer."""
    import pandas as pd

    from latsim.costmodel.profile.floor import without_floor

    folder = Path(__file__).resolve().parents[2] / "latsim" / "data" / "calibration" / "h200"
    p = load_predictors(folder)
    shape = (128, 8, 2048, 768)  # Qwen3-30B-A3B's experts, in the shipped H200 grid
    rows = pd.read_parquet(folder / "moe.parquet")
    rows = rows[(rows.experts == 128) & (rows.top_k == 8) & (rows.hidden == 2048) & (rows.inter == 768)
                & (rows.status == "ok")].sort_values("tokens")
    rows = without_floor(rows, p.report["timer_floor_s"], p.report["graph_gap_s"])
    assert 0.0 < p.report["graph_gap_s"] < 0.05 * rows["median_s"].min()  # a small correction
    tokens = rows["tokens"].to_numpy(dtype=np.float64)
    h200 = load_device("h200")
    np.testing.assert_allclose(p.moe_s(tokens, shape, h200, 2.0), rows["median_s"].to_numpy(), rtol=1e-9)
    between = np.sqrt(tokens[:-1] * tokens[1:])
    priced = p.moe_s(between, shape, h200, 2.0)
    low, high = rows["median_s"].to_numpy()[:-1], rows["median_s"].to_numpy()[1:]
    assert np.all((priced >= np.minimum(low, high) - 1e-12) & (priced <= np.maximum(low, high) + 1e-12))
    a100 = p.moe_s(tokens, shape, load_device("a100"), 2.0)
    assert not np.allclose(a100, rows["median_s"].to_numpy(), rtol=0.05)  # the transfer, not the H200's rows


def _lone_call_s(pred: Predictors, dev: DeviceSpec, heads: tuple[int, int, int], q: float, ctx: float) -> float:
    return float(pred.attn_prefill_s(np.array([q]), np.array([ctx]), heads, dev)[0])


def _with_batching(rule: str | None, name: str = "gemma-2-9b") -> CalibratedCostModel:
    """The shipped H200 profile's cost model of ``name`` with ``prefill_batching`` set to ``rule``
    (``None``: the key taken out)."""
    dev, model, shipped = load_device("h200"), load_model(name), load_predictors(has_profile("h200"))
    profile = {k: v for k, v in shipped.profile.items() if k != "prefill_batching"}
    pred = replace(shipped, profile=profile if rule is None else {**profile, "prefill_batching": rule})
    shard = shard_model(model, 1)
    return CalibratedCostModel(model, dev, shard, build_tables(pred, shard, dev, model.head_dim),
                               FixedCosts(0.0, 0.0, 0.0, 0.0), weight_dtype="bf16", kv_dtype="bf16")


@pytest.fixture(scope="module")
def batched_gemma() -> CalibratedCostModel:
    return _with_batching("heads")


@pytest.mark.parametrize(("n", "q", "ctx"), [(16, 512, 0), (4, 1024, 2048), (64, 128, 0)])
def test_chunks_in_one_step_cost_one_call_under_n_times_the_heads(
        batched_gemma: CalibratedCostModel, n: int, q: int, ctx: int) -> None:
    """vLLM runs a step's prompts in one attention call: with ``prefill_batching: heads`` priced
    as one chunk with n x the heads (the profile's regressor; its tables every other knot, within
    the one-chunk table's own interpolation error), not as n lone calls."""
    cm = batched_gemma
    pred, dev = load_predictors(has_profile("h200")), load_device("h200")
    heads = heads_of(cm.shard, cm.model.head_dim)
    priced = cm.attention_s(BatchShape.from_chunks([(q, ctx)] * n, [])) / cm.shard.layers
    batched = _lone_call_s(pred, dev, (n * heads[0], n * heads[1], heads[2]), q, ctx)
    assert priced == pytest.approx(batched, rel=0.1)
    assert priced < 0.8 * n * _lone_call_s(pred, dev, heads, q, ctx)


def test_one_chunk_keeps_its_own_table_and_counts_between_knots_interpolate(
        batched_gemma: CalibratedCostModel) -> None:
    cm = batched_gemma
    tb = cm.tables
    assert cm._prefill_ratio(1, 512.0, 0.0) == bilinear(tb.q_knots, tb.pc_knots, tb.prefill_ratio, 512.0, 0.0)
    ratios = [cm._prefill_ratio(n, 512.0, 0.0) for n in (2, 3, 4)]
    assert min(ratios[0], ratios[2]) <= ratios[1] <= max(ratios[0], ratios[2])
    one = cm.attention_s(BatchShape.from_chunks([(512, 0)], []))
    assert one < cm.attention_s(BatchShape.from_chunks([(512, 0)] * 2, []))
    assert cm._prefill_ratio(10_000, 64.0, 0.0) == cm._prefill_ratio(128, 64.0, 0.0)  # past the last count


def test_a_profile_without_the_rule_prices_chunks_as_lone_calls(batched_gemma: CalibratedCostModel) -> None:
    """The measured H100 and H200 profiles carry the rule (the fifty-eighth session); a profile
    without the key, or with ``lone``, prices n chunks as n lone calls."""
    for device in ("h100", "h200"):
        assert load_calibrated(load_model("gemma-2-9b"), load_device(device)).tables.prefill_batched
    lone = _with_batching("lone")
    assert not lone.tables.prefill_batched
    assert lone._prefill_ratio(16, 512.0, 0.0) == lone._prefill_ratio(1, 512.0, 0.0)
    step = BatchShape.from_chunks([(512, 0)] * 16, [])
    assert _with_batching(None).attention_s(step) == pytest.approx(lone.attention_s(step))
    assert batched_gemma.attention_s(step) < 0.8 * lone.attention_s(step)


def test_an_unknown_batching_rule_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="prefill_batching='waves'; accepted: lone, heads"):
        _with_batching("waves")
