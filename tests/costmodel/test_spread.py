"""Decode attention over spread contexts (latsim.costmodel.spread): the factor, its file, its wiring."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from latsim.catalog.lookup import load_device, load_model
from latsim.costmodel.batch import BatchShape, run_squares, squares_after
from latsim.costmodel.calibrated import load_calibrated
from latsim.costmodel.spread import SPREAD_FILE, DecodeSpread, KvTable, load_decode_spread

TABLE = KvTable(8, (16.0, 64.0, 512.0), (512.0, 4096.0),
                ((0.0, 0.0), (0.2, 0.3), (0.1, 0.2)))
SPREAD = DecodeSpread((TABLE,), cv_full=0.4, source="test")


def sums(contexts: list[int]) -> tuple[float, float]:
    return float(sum(contexts)), float(sum(c * c for c in contexts))


def test_one_sequence_equal_contexts_and_unknown_squares_cost_nothing_more() -> None:
    assert SPREAD.factor(1, 8, 4096.0, 4096.0**2) == 1.0
    kv, sq = sums([2048] * 16)
    assert SPREAD.factor(16, 8, kv, sq) == 1.0
    assert SPREAD.factor(16, 8, kv, 0.0) == 1.0


def test_full_spread_reaches_the_table_and_less_spread_a_share_of_it() -> None:
    wide = [500, 1500, 3000, 7000] * 2  # 8 sequences x 8 KV heads = 64 units, cv ~ 0.8
    kv, sq = sums(wide)
    mean = kv / 8
    expected = 0.2 + (0.3 - 0.2) * (mean - 512.0) / (4096.0 - 512.0)
    assert SPREAD.factor(8, 8, kv, sq) == pytest.approx(1.0 + expected)
    narrow = [1000, 1100] * 4  # cv ~ 0.048: an eighth of cv_full
    kv, sq = sums(narrow)
    cv = np.std(narrow) / np.mean(narrow)
    excess = 0.2 + 0.1 * (np.mean(narrow) - 512.0) / 3584.0
    assert SPREAD.factor(8, 8, kv, sq) == pytest.approx(1.0 + excess * cv / 0.4)


def test_units_and_contexts_outside_the_knots_take_the_edge() -> None:
    kv, sq = sums([100, 300])  # 2 x 8 = 16 units, context under the first knot: excess 0
    assert SPREAD.factor(2, 8, kv, sq) == 1.0
    big = [20_000, 60_000] * 64  # 1,024 units, context past the last knot
    kv, sq = sums(big)
    assert SPREAD.factor(128, 8, kv, sq) == pytest.approx(1.2)


def test_vector_path_is_bitwise_the_scalar_one() -> None:
    rng = np.random.default_rng(3)
    for seqs in (2, 7, 40, 300):
        contexts = rng.integers(1, 30_000, seqs)
        kv0, sq0 = int(contexts.sum()), int((contexts * contexts).sum())
        steps = 50
        kv = kv0 + seqs * np.arange(steps, dtype=np.float64)
        sq = run_squares(seqs, kv0, sq0, steps)
        vec = SPREAD.factor_vec(seqs, 8, kv, sq)
        for i in range(steps):
            assert sq[i] == squares_after(seqs, kv0, sq0, i) == int(((contexts + i) ** 2).sum())
            assert vec[i] == SPREAD.factor(seqs, 8, float(kv[i]), float(sq[i]))


def test_a_deployment_reads_the_table_of_the_nearest_kv_head_count() -> None:
    tables = tuple(KvTable(h, TABLE.unit_knots, TABLE.ctx_knots, TABLE.excess) for h in (4, 8, 32))
    spread = DecodeSpread(tables, 0.4, "test")
    picked = [spread.table_for(h).kv_heads for h in (1, 4, 5, 6, 8, 12, 16, 17, 40, 128)]
    assert picked == [4, 4, 4, 8, 8, 8, 8, 32, 32, 32]


@pytest.mark.parametrize("bad", [
    {"tables": [{"kv_heads": 8, "unit_knots": [16, 8], "ctx_knots": [512, 1024], "excess": [[0, 0], [0, 0]]}],
     "cv_full": 0.2},
    {"tables": [{"kv_heads": 8, "unit_knots": [16, 32], "ctx_knots": [512, 1024], "excess": [[0, 0]]}], "cv_full": 0.2},
    {"tables": [], "cv_full": 0.2},
    {"tables": [{"kv_heads": 8, "unit_knots": [16, 32], "ctx_knots": [512, 1024], "excess": [[0, 0], [0, 0]]}],
     "cv_full": 0.0},
    {"cv_full": 0.2},
])
def test_a_malformed_file_is_named(tmp_path: Path, bad: dict) -> None:
    (tmp_path / SPREAD_FILE).write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=SPREAD_FILE):
        load_decode_spread(tmp_path)


def test_a_profile_without_the_file_has_no_spread(tmp_path: Path) -> None:
    assert load_decode_spread(tmp_path) is None


def long_prompt_batch(seqs: int, mean: int) -> list[int]:
    rng = np.random.default_rng(seqs)
    w = np.exp(0.8 * rng.standard_normal(seqs))
    return [int(x) for x in np.round(mean * w / w.mean())]


def test_the_shipped_h200_profile_prices_a_spread_long_context_batch_above_an_equal_one() -> None:
    cm = load_calibrated(load_model("llama-3.1-8b"), load_device("h200"))
    assert cm.spread is not None
    contexts = long_prompt_batch(16, 5000)
    spread = BatchShape.from_chunks([], contexts)
    equal = BatchShape(decode_seqs=16, decode_kv_tokens=sum(contexts))
    assert spread.decode_kv_sq == sum(c * c for c in contexts)
    extra = (cm.step_time(spread) - cm.step_time(equal)) / cm.attention_s(equal)
    # the probe's 8B shape at 16 sequences of 4,096-8,192 tokens: 1.09-1.24 x the equal batch
    assert 0.08 < extra < 0.35
    assert cm.step_time(BatchShape.from_chunks([], [5000] * 16)) == pytest.approx(cm.step_time(equal))


def test_profiles_without_spread_data_price_as_before() -> None:
    cm = load_calibrated(load_model("llama-3.1-8b"), load_device("a100"))  # imported, FA2: no table
    assert cm.spread is None
    contexts = long_prompt_batch(16, 5000)
    assert cm.step_time(BatchShape.from_chunks([], contexts)) == cm.step_time(
        BatchShape(decode_seqs=16, decode_kv_tokens=sum(contexts)))


@pytest.mark.parametrize("model", ["llama-3.1-8b", "mistral-7b", "phi-3-mini"])
def test_a_decode_run_with_spread_contexts_equals_its_steps_bitwise(model: str) -> None:
    cm = load_calibrated(load_model(model), load_device("h200"))
    contexts = long_prompt_batch(24, 6000)
    kv0, sq0 = sum(contexts), sum(c * c for c in contexts)
    run = cm.decode_run(24, kv0, 40, sq0)
    for i in range(40):
        shape = BatchShape(decode_seqs=24, decode_kv_tokens=kv0 + 24 * i, decode_kv_sq=squares_after(24, kv0, sq0, i))
        assert run[i] == cm.step_time(shape)
    assert run[0] > cm.decode_run(24, kv0, 1)[0]  # the spread costs more than unknown (equal) contexts


def test_the_prediction_names_the_spread_table_it_used() -> None:
    h200 = load_calibrated(load_model("llama-3.1-8b"), load_device("h200")).describe()
    assert str(h200["decode_spread"]["source"]).endswith(SPREAD_FILE)
    h100 = load_calibrated(load_model("llama-3.1-8b"), load_device("h100")).describe()  # the H200's, transferred
    assert str(h100["decode_spread"]["source"]).endswith(f"h100/{SPREAD_FILE}")
    assert load_calibrated(load_model("llama-3.1-8b"), load_device("a100")).describe()["decode_spread"] is None
