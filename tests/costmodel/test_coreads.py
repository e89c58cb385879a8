"""Co-reads of shared prefix blocks (:mod:`latsim.costmodel.coreads`) and their discount of a step's KV."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from latsim.catalog.lookup import load_device, load_model
from latsim.costmodel.batch import BatchShape, squares_after
from latsim.costmodel.coreads import (
    CoReads,
    coreads_for,
    decode_tile_rows,
    expected_saved,
    layer_prompt_rows,
    layer_tile_rows,
    load_coreads,
    ordered_saved,
    prompt_tile_rows,
)
from latsim.sim.shape import discounted_kv, with_coreads

TERMS = CoReads(saving=0.6, ctas_per_sm=1.0, hbm_bandwidth=3.35e12, source="test")


def test_ordered_co_reads_count_the_repeat_readers_of_each_wave():
    tokens = {0: 100, 1: 100}
    order = [0, 1, 0, 1, 0, 1, 0, 1]
    assert ordered_saved(order, tokens, wave=8) == 6 * 100  # one wave: every reader after the first
    assert ordered_saved(order, tokens, wave=4) == 4 * 100  # two waves, each reads both prefixes once
    assert ordered_saved(order, tokens, wave=2) == 0.0  # every wave holds one reader of each
    assert ordered_saved([0, -1, 0, -1], {0: 50}, wave=4) == 50.0  # -1: no shared prefix


def test_a_batch_in_one_wave_co_reads_all_but_the_first_reader():
    assert expected_saved(10, [(4, 1000), (3, 500)], wave=64.0) == pytest.approx(3 * 1000 + 2 * 500)
    assert expected_saved(1, [(1, 1000)], wave=8.0) == 0.0
    assert expected_saved(10, [], wave=8.0) == 0.0


@pytest.mark.parametrize(("seqs", "counts", "wave"), [(64, (16, 16, 16, 16), 16), (64, (4,) * 16, 16),
                                                      (48, (24, 12, 6), 12), (96, (32, 32), 8)])
def test_expected_co_reads_match_random_orders(seqs, counts, wave):
    """Simulation study: the mean over random orders of the exact count (waves of ``wave``
    sequences dividing the batch) agrees with the closed form within 2 %."""
    rng = np.random.default_rng(7)
    order = np.concatenate([np.full(n, g) for g, n in enumerate(counts)] + [np.full(seqs - sum(counts), -1)])
    tokens = dict.fromkeys(range(len(counts)), 1)
    draws = [ordered_saved(rng.permutation(order).tolist(), tokens, float(wave)) for _ in range(3000)]
    closed = expected_saved(seqs, [(n, 1) for n in counts], float(wave))
    assert np.mean(draws) == pytest.approx(closed, rel=0.02)


def test_a_faster_hbm_leaves_less_to_save():
    assert TERMS.saving_at(3.35e12) == pytest.approx(0.6)
    assert TERMS.saving_at(4.8e12) == pytest.approx(1 - 0.4 * 4.8 / 3.35)
    assert TERMS.saving_at(1e14) == 0.0  # clamped
    bound = TERMS.bind(sm_count=132, kv_heads=8, hbm_bandwidth=3.35e12)
    assert bound.wave == pytest.approx(16.5)
    assert bound.discount(8, [(8, 1024)]) == pytest.approx(0.6 * 7 * 1024)


@pytest.mark.parametrize(("field", "value"), [("saving", 1.2), ("saving", -0.1), ("ctas_per_sm", 0.0),
                                              ("hbm_bandwidth", -1.0)])
def test_out_of_range_terms_are_refused(field, value):
    args = {"saving": 0.5, "ctas_per_sm": 1.0, "hbm_bandwidth": 1e12, "source": "t", field: value}
    with pytest.raises(ValueError, match=field if field != "saving" else "saving"):
        CoReads(**args)


def test_files_load_or_are_named_when_malformed(tmp_path: Path):
    assert load_coreads(tmp_path / "absent.json") is None
    bad = tmp_path / "coreads.json"
    bad.write_text(json.dumps({"saving": 0.5}))
    with pytest.raises(ValueError, match=r"coreads\.json: not a co-read file"):
        load_coreads(bad)
    bad.write_text(json.dumps({"saving": 0.5, "ctas_per_sm": 1.0, "hbm_bandwidth_gb_s": 3350}))
    assert load_coreads(bad) == CoReads(0.5, 1.0, 3.35e12, str(bad))


def test_only_hopper_gpus_with_an_sm_count_get_co_reads():
    model = load_model("llama-3.1-8b")
    assert coreads_for(load_device("a100"), model) is None
    h200 = coreads_for(load_device("h200"), model)
    assert h200 is not None and 0.0 < h200.saving < load_coreads().saving  # type: ignore[union-attr]


@pytest.mark.parametrize(("head_dim", "group", "windowed", "rows"), [
    (128, 4, False, 64), (128, 1, False, 64), (64, 8, False, 64),  # one warpgroup's 64 rows
    (96, 1, False, 192), (80, 1, False, 192),  # head dim up to 96: 192 rows
    (128, 4, True, 128), (256, 2, False, 128),  # a window; head dim 256
    (128, 128, False, 128), (64, 4, True, 192)])  # a group past 64 rows; a window at head dim 64
def test_the_decode_tile_follows_fa3s_choice(head_dim, group, windowed, rows):
    assert decode_tile_rows(head_dim, group, windowed) == rows


def test_a_tile_of_bad_sizes_is_refused():
    with pytest.raises(ValueError, match="head_dim and queries_per_kv"):
        decode_tile_rows(0, 4)


def test_a_tall_tile_caps_what_a_co_read_saves():
    """A co-read saves at most ``1 - rows / ridge``; the ridge scales with FLOP/s over bandwidth."""
    capped = CoReads(0.6, 1.0, 3.35e12, "t", ridge_rows=200.0, ridge_rows_fp8=80.0, peak_flops=1e15)
    assert capped.cap_at(64, 3.35e12, 1e15) == pytest.approx(1 - 64 / 200)
    assert capped.cap_at(192, 3.35e12, 1e15) == pytest.approx(0.04)
    assert capped.cap_at(192, 2 * 3.35e12, 1e15) == 0.0  # twice the bandwidth halves the ridge
    assert capped.cap_at(64, 3.35e12, 2e15) == pytest.approx(1 - 64 / 400)
    assert capped.cap_at(64, 3.35e12, 0.0) == 0.0  # a GPU without a FLOP figure
    assert capped.cap_at(64, 3.35e12, 1e15, "fp8") == pytest.approx(1 - 64 / 80)  # an FP8 cache's ridge
    assert TERMS.cap_at(192, 3.35e12, 1e15) == 1.0  # no ridge: no cap
    bound = capped.bind(132, 32, 3.35e12, 1e15, [(0.5, 64), (0.5, 192)])
    assert bound.saving == pytest.approx(0.5 * 0.6 + 0.5 * 0.04)  # the layers' mean, each capped
    with pytest.raises(ValueError, match="peak_flops"):
        CoReads(0.6, 1.0, 3.35e12, "t", ridge_rows=200.0)
    with pytest.raises(ValueError, match="ridge_rows_fp8"):
        CoReads(0.6, 1.0, 3.35e12, "t", ridge_rows_fp8=0.0)


def test_layers_run_the_tile_of_their_kind():
    assert layer_tile_rows(load_model("llama-3.1-8b")) == [(1.0, 64)]
    assert layer_tile_rows(load_model("llama-2-7b")) == [(1.0, 64)]  # multi-head, head dim 128
    assert layer_tile_rows(load_model("phi-3-mini")) == [(1.0, 192)]
    assert layer_tile_rows(load_model("mistral-7b")) == [(1.0, 128)]  # a window on every layer
    gemma = load_model("gemma-3-27b")
    full = gemma.num_full_attention_layers / gemma.num_layers
    assert layer_tile_rows(gemma) == [(pytest.approx(full), 64), (pytest.approx(1 - full), 128)]


def test_the_shipped_cap_leaves_64_row_tiles_their_saving_and_takes_most_of_the_others():
    """Measured on the H100: Phi-3-mini (192 rows) and the 8B over an FP8 cache saved a fraction
    of what the 8B and Llama-2-7B (64 rows over bf16) saved; Mistral-7B (128 rows) about 2/3."""
    h100 = load_device("h100")
    terms = load_coreads()
    assert terms is not None and terms.ridge_rows < 1000 and terms.ridge_rows_fp8 < terms.ridge_rows

    def saving(model: str, kv_dtype: str = "bf16") -> float:
        bound = coreads_for(h100, load_model(model), kv_dtype=kv_dtype)
        assert bound is not None
        return bound.saving

    assert saving("llama-3.1-8b") == pytest.approx(terms.saving) == pytest.approx(saving("llama-2-7b"))
    assert 0.0 <= saving("phi-3-mini") < terms.saving / 3
    assert 0.0 <= saving("llama-3.1-8b", "fp8") < terms.saving / 3
    assert terms.saving / 2 < saving("mistral-7b") < terms.saving
    assert coreads_for(h100, load_model("phi-3-mini")).wave == pytest.approx(132 / 32)  # type: ignore[union-attr]


@given(kv=st.integers(1000, 10**6), seqs=st.integers(2, 256), share=st.floats(0.0, 0.6), steps=st.integers(0, 50))
def test_a_discounted_run_evolves_as_its_discounted_steps(kv, seqs, share, steps):
    """The fast engine discounts a decode run's first step and lets it grow; the reference
    discounts every step: the same integers either way."""
    contexts = np.linspace(1, 2 * kv / seqs, seqs).astype(int) + 1
    kv0, sq0 = int(contexts.sum()), int((contexts * contexts).sum())
    saved = int(share * kv0)
    run_kv, run_sq = discounted_kv(kv0, sq0, seqs, saved)
    step_kv, step_sq = discounted_kv(kv0 + steps * seqs, squares_after(seqs, kv0, sq0, steps), seqs, saved)
    assert step_kv == run_kv + steps * seqs
    assert step_sq == squares_after(seqs, run_kv, run_sq, steps)


def test_an_even_discount_keeps_the_spread_of_the_contexts():
    contexts = [1000, 1500, 2500, 3000]
    shape = BatchShape.from_chunks([], contexts)
    cut = with_coreads(shape, 4 * 400)
    assert cut.decode_kv_tokens == sum(c - 400 for c in contexts)
    assert cut.decode_kv_sq == sum((c - 400) ** 2 for c in contexts)
    assert with_coreads(shape, 0) is shape


def test_a_prediction_says_which_co_read_terms_it_used():
    from latsim.catalog.lookup import load_model
    from latsim.costmodel.factory import build_cost_model

    model = load_model("llama-3.1-8b")
    h200 = build_cost_model(model, load_device("h200"), kind="roofline").describe()["coreads"]
    terms = load_coreads()
    assert terms is not None
    wave = terms.ctas_per_sm * 132 / 8
    saving = terms.saving_at(4.8e12, "h200")
    prompt = min(saving, terms.cap_at(128, 4.8e12, load_device("h200").peak_flops["bf16"]))
    assert h200 == {"saving": pytest.approx(saving), "prompt_saving": pytest.approx(prompt),
                    "wave": pytest.approx(wave), "source": terms.source}
    assert build_cost_model(model, load_device("a100"), kind="roofline").describe()["coreads"] is None


def test_a_gpu_with_its_own_measured_saving_uses_it_and_others_scale():
    terms = CoReads(0.6, 1.0, 3.35e12, "t", gpu_savings=(("h200", 0.35),))
    assert terms.saving_at(4.8e12, "h200") == 0.35
    assert terms.saving_at(4.8e12, "h20") == pytest.approx(1 - 0.4 * 4.8 / 3.35)  # not measured there: scaled
    assert terms.saving_at(4.8e12) == pytest.approx(1 - 0.4 * 4.8 / 3.35)
    assert terms.bind(132, 8, 4.8e12, gpu="h200").saving == 0.35
    with pytest.raises(ValueError, match="saving on h200 must be within"):
        CoReads(0.6, 1.0, 3.35e12, "t", gpu_savings=(("h200", 1.5),))


def test_the_shipped_file_carries_the_h200s_own_saving():
    """The H200's traces (``data/traces/h200/s47``) saved less than the H100's scaled to its HBM."""
    terms = load_coreads()
    assert terms is not None
    own = dict(terms.gpu_savings)["h200"]
    assert 0.0 < own < terms.saving_at(4.8e12)
    assert coreads_for(load_device("h200"), load_model("llama-3.1-8b")).saving == own  # type: ignore[union-attr]


@pytest.mark.parametrize(("head_dim", "rows"), [(64, 192), (80, 192), (96, 192), (128, 128), (256, 128)])
def test_a_prompt_carrying_call_runs_the_tall_tile(head_dim, rows):
    assert prompt_tile_rows(head_dim) == rows
    with pytest.raises(ValueError, match="head_dim"):
        prompt_tile_rows(0)


def test_a_step_carrying_a_prompt_saves_less_of_its_decoders_co_reads():
    """Every layer of a step with a prompt chunk runs the prompt tile (or its taller decode tile):
    the cap of 128 rows takes most of the 64-row tile's saving on the shipped terms."""
    assert layer_prompt_rows(load_model("llama-3.1-8b")) == [(1.0, 128)]
    assert layer_prompt_rows(load_model("phi-3-mini")) == [(1.0, 192)]
    capped = CoReads(0.6, 1.0, 3.35e12, "t", ridge_rows=200.0, peak_flops=1e15)
    bound = capped.bind(132, 8, 3.35e12, 1e15, [(1.0, 64)], prompt_rows=[(1.0, 128)])
    assert bound.saving == pytest.approx(0.6) and bound.prompt_saving == pytest.approx(1 - 128 / 200)
    assert bound.discount(8, [(8, 1000)], prompt=True) == pytest.approx((1 - 128 / 200) * 7 * 1000)
    assert capped.bind(132, 8, 3.35e12, 1e15, [(1.0, 64)]).prompt_saving == pytest.approx(0.6)  # no prompt rows
    h200 = coreads_for(load_device("h200"), load_model("llama-3.1-8b"))
    assert h200 is not None and 0.0 < h200.prompt_saving < h200.saving / 1.5
