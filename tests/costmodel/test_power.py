"""The GPU power-cap model (latsim.costmodel.power): its terms, its file, and its dynamics."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import pytest

from latsim.costmodel.batch import BatchShape
from latsim.costmodel.power import PowerCap, PowerClock, load_power_cap

CAP = PowerCap(full_clock_ratio=0.87, capped_ratio=1.09, budget_s=0.045, refill=0.85, heavy_tokens=2048)
PREFILL = BatchShape.from_chunks([(8192, 0)], [])
DECODE = BatchShape(decode_seqs=64, decode_kv_tokens=64 * 1024)


class HeavyCost:
    """A step of ``step_s`` seconds, all of it heavy (the power data covers it)."""

    def __init__(self, cap: PowerCap | None = CAP, heavy_share: float = 1.0, step_s: float = 0.1) -> None:
        self.power, self.heavy_share, self.step_s = cap, heavy_share, step_s

    def heavy_parts(self, shape: BatchShape, light: bool = False) -> tuple[float, float, float]:
        assert self.power is not None
        return self.step_s * self.heavy_share, self.power.full_clock_ratio, self.power.capped_ratio


def run(clock: PowerClock, cost: HeavyCost, starts: list[float], dur: float = 0.1) -> list[float]:
    return [clock.end(cost, PREFILL, s, s + dur) - s for s in starts]


def test_a_heavy_step_after_idle_runs_near_full_clock_and_back_to_back_ones_at_the_cap() -> None:
    cold = run(PowerClock(), HeavyCost(), [0.0])[0]
    assert cold < 0.1  # the profile's price is between full clock and the cap
    clock, t, durs = PowerClock(), 0.0, []
    for _ in range(30):
        durs.append(run(clock, HeavyCost(), [t])[0])
        t += durs[-1]
    assert durs[-1] == pytest.approx(0.1 * CAP.capped_ratio, rel=0.02)
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(durs))  # heats up, never cools
    later = run(clock, HeavyCost(), [t + 1.0])[0]  # a second of idle: cold again
    assert later == pytest.approx(cold)


def test_light_steps_and_models_without_power_data_are_untouched() -> None:
    clock = PowerClock()
    assert clock.end(HeavyCost(), DECODE, 1.0, 1.02) == 1.02  # decode-only
    small = BatchShape.from_chunks([(512, 0)], [])
    assert clock.end(HeavyCost(), small, 1.0, 1.02) == 1.02  # under heavy_tokens
    assert clock.end(HeavyCost(cap=None), PREFILL, 1.0, 1.2) == 1.2
    assert clock.end(object(), PREFILL, 1.0, 1.2) == 1.2  # a cost model with no power attribute
    assert clock.last_end == -math.inf


def test_a_share_of_light_work_in_the_step_keeps_the_clock_up() -> None:
    clock_all, clock_half, t_all, t_half = PowerClock(), PowerClock(), 0.0, 0.0
    for _ in range(20):
        t_all = clock_all.end(HeavyCost(), PREFILL, t_all, t_all + 0.1)
        t_half = clock_half.end(HeavyCost(heavy_share=0.5), PREFILL, t_half, t_half + 0.1)
    # half light at a refill of 0.85: the heavy half spends 0.05 s, the light half returns 0.0425 s a
    # step, so the budget lasts a few steps and then most of each heavy half runs capped
    assert t_half / 20 < t_all / 20
    assert t_all / 20 == pytest.approx(0.1 * CAP.capped_ratio, rel=0.03)


def test_the_budget_spends_and_refills_as_its_terms_say() -> None:
    clock = PowerClock()
    first = clock.end(HeavyCost(step_s=0.03), PREFILL, 0.0, 0.03)  # 30 ms of a 45 ms budget
    assert first == pytest.approx(0.03 * CAP.full_clock_ratio) and clock.budget == pytest.approx(0.015)
    second = clock.end(HeavyCost(step_s=0.03), PREFILL, first, first + 0.03) - first
    # 15 ms at full clock, 15 ms capped
    assert second == pytest.approx(0.015 * CAP.full_clock_ratio + 0.015 * CAP.capped_ratio)
    assert clock.budget == 0.0
    start = clock.last_end + 0.02  # 20 ms idle refill 17 ms
    third = clock.end(HeavyCost(step_s=0.03), PREFILL, start, start + 0.03) - start
    assert third == pytest.approx(0.017 * CAP.full_clock_ratio + 0.013 * CAP.capped_ratio)
    assert clock.budget == 0.0


@pytest.mark.parametrize("field, value", [("budget_s", -0.1), ("refill", 0.0), ("capped_ratio", 3.0),
                                          ("full_clock_ratio", 0.1), ("heavy_tokens", 0)])
def test_out_of_range_terms_are_named(field: str, value: float) -> None:
    terms = {"full_clock_ratio": 0.9, "capped_ratio": 1.1, "budget_s": 0.05, "refill": 0.5,
             "heavy_tokens": 2048, field: value}
    with pytest.raises(ValueError, match=field):
        PowerCap(**terms)  # type: ignore[arg-type]


def test_power_file_loads_is_optional_and_a_broken_one_is_named(tmp_path: Path) -> None:
    assert load_power_cap(tmp_path) is None
    (tmp_path / "power.json").write_text(json.dumps({"full_clock_ratio": 0.9, "capped_ratio": 1.1}))
    with pytest.raises(ValueError, match=r"power\.json.*fit_power"):
        load_power_cap(tmp_path)
    (tmp_path / "power.json").write_text(json.dumps({"full_clock_ratio": 0.9, "capped_ratio": 1.1, "budget_s": 0.05,
                                                      "refill": 0.5, "heavy_tokens": 2048}))
    cap = load_power_cap(tmp_path)
    assert cap is not None and cap.budget_s == 0.05 and cap.source.endswith("power.json")


def test_quantized_gemm_ratios_load_and_bad_ones_are_named(tmp_path: Path) -> None:
    terms = {"full_clock_ratio": 0.9, "capped_ratio": 1.1, "budget_s": 0.05, "refill": 0.5, "heavy_tokens": 2048}
    gemms = {"int4": {"full_clock_ratio": 0.85, "capped_ratio": 0.95},
             "fp8": {"full_clock_ratio": 0.8, "capped_ratio": 1.2}}
    (tmp_path / "power.json").write_text(json.dumps({**terms, "gemms": gemms}))
    cap = load_power_cap(tmp_path)
    assert cap is not None and cap.ratios("int4") == (0.85, 0.95) and cap.ratios("fp8") == (0.8, 1.2)
    assert cap.ratios("bf16") == (0.9, 1.1) == cap.attention_ratios() and cap.ratios("int8") is None
    (tmp_path / "power.json").write_text(json.dumps({**terms, "gemms": {**gemms, "bf16": {
        "full_clock_ratio": 1.0, "capped_ratio": 1.15}}}))
    own = load_power_cap(tmp_path)
    assert own is not None and own.ratios("bf16") == (1.0, 1.15) and own.attention_ratios() == (0.9, 1.1)
    with pytest.raises(ValueError, match="int3"):
        PowerCap(**terms, gemm_ratios=(("int3", 0.9, 1.1),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fp8"):
        PowerCap(**terms, gemm_ratios=(("fp8", 0.9, 4.0),))  # type: ignore[arg-type]
    (tmp_path / "power.json").write_text(json.dumps({**terms, "gemms": {"int4": {"full_clock_ratio": 0.85}}}))
    with pytest.raises(ValueError, match=r"power\.json.*fit_power"):
        load_power_cap(tmp_path)


def test_a_step_mixing_gemm_classes_pays_their_average_by_seconds() -> None:
    """An AWQ-class 4-bit model: its GEMMs at the int4 pair, its bf16 prefill attention at the bf16
    pair, the step at their average weighted by seconds; an fp8 cache leaves only the GEMMs."""
    from dataclasses import replace

    from latsim.catalog.lookup import load_device, load_model
    from latsim.costmodel.calibrated import load_calibrated

    long_prefill = BatchShape.from_chunks([(8192, 16384)], [])
    cm = load_calibrated(load_model("llama-3.1-8b"), load_device("h200"), weight_dtype="int4")
    assert cm.power is not None
    cm.power = replace(cm.power, gemm_ratios=(("int4", 0.6, 1.9),))
    heavy, full, capped = cm.heavy_parts(long_prefill)
    assert 0.6 < full < cm.power.full_clock_ratio and cm.power.capped_ratio < capped < 1.9
    gemm_only = load_calibrated(load_model("llama-3.1-8b"), load_device("h200"), weight_dtype="int4", kv_dtype="fp8")
    gemm_only.power = cm.power
    g_heavy, g_full, g_capped = gemm_only.heavy_parts(long_prefill)
    assert (g_full, g_capped) == (0.6, 1.9) and 0.0 < g_heavy < heavy
    cm.power = replace(cm.power, gemm_ratios=())  # no int4 data: only the attention is covered
    a_heavy, a_full, a_capped = cm.heavy_parts(long_prefill)
    assert a_heavy == pytest.approx(heavy - g_heavy, rel=0.01) and (a_full, a_capped) == (cm.power.full_clock_ratio,
                                                                                  cm.power.capped_ratio)


def test_the_shipped_h200_profile_carries_its_fitted_power_cap() -> None:
    from latsim.catalog.lookup import load_device, load_model
    from latsim.costmodel.calibrated import load_calibrated

    cm = load_calibrated(load_model("llama-3.1-8b"), load_device("h200"))
    assert cm.power is not None and cm.power.capped_ratio > 1.0 > cm.power.full_clock_ratio
    gemm_r, attn_r = cm.power.ratios("bf16"), cm.power.attention_ratios()
    assert gemm_r is not None and gemm_r != attn_r  # bf16 GEMMs, timed at the full clock, have their own pair
    heavy, full, capped = cm.heavy_parts(PREFILL)
    assert 0.0 < heavy < cm.step_time(PREFILL)
    assert min(gemm_r[0], attn_r[0]) < full < max(gemm_r[0], attn_r[0])
    assert min(gemm_r[1], attn_r[1]) < capped < max(gemm_r[1], attn_r[1])


def test_the_shipped_caps_count_a_prompt_step_s_rate_at_their_fitted_weights() -> None:
    """The H100's and the H200's caps (fitted from their own probes and decode traces) weigh a
    prompt step's own tensor rate below the decoders' (their sustained GEMMs sit low on the
    decode-fitted ramp); the H200's keeps the bf16 light ratio its stamped 32B run measured, above
    the sustained pair's; the H100's import has no cap."""
    from latsim.catalog.lookup import load_device, load_model
    from latsim.costmodel.calibrated import load_calibrated

    h100 = load_calibrated(load_model("llama-3.1-8b"), load_device("h100"))
    h200 = load_calibrated(load_model("llama-3.1-8b"), load_device("h200"))
    assert h100.power is not None and h200.power is not None
    assert h100.power.has_decode_cap and 0.0 < h100.power.prompt_rate_weight < 1.0
    assert h200.power.has_decode_cap and 0.0 < h200.power.prompt_rate_weight < 1.0
    assert h200.power.ratios("bf16", light=True)[1] > h200.power.ratios("bf16")[1]
    assert load_power_cap(Path(h100.power.source).parents[1] / "h100-aic") is None


def test_the_duty_cycles_of_the_measurement_order_as_measured() -> None:
    """Calls of 2.3 ms, ``on_ms`` busy and ``off_ms`` idle: the model's mean ratio over the last
    cycles falls as the pause grows, as the probe measured (200/50 hot, 100/100 between, 50/200
    near full clock)."""
    def mean_ratio(on_ms: float, off_ms: float) -> float:
        clock, t, ratios = PowerClock(), 0.0, []
        cost = HeavyCost(step_s=0.0023)
        for _ in range(12):
            stop = t + on_ms / 1e3
            while t < stop:
                end = clock.end(cost, PREFILL, t, t + 0.0023)
                ratios.append((end - t) / 0.0023)
                t = end
            t += off_ms / 1e3
        return sum(ratios[-200:]) / 200
    assert mean_ratio(200, 50) > mean_ratio(100, 100) > mean_ratio(50, 200)


RAMP = PowerCap(full_clock_ratio=1.0, capped_ratio=1.2, budget_s=0.045, refill=0.85, heavy_tokens=2048,
                decode_onset_tflops=100.0, decode_full_tflops=300.0, decode_tau_s=0.1)
PROMPT_BESIDE = BatchShape.from_chunks([(512, 0)], [600] * 128)


class RateCost(HeavyCost):
    """``HeavyCost`` with a tensor rate: decoders at ``decode_tflops``, 0.1 TFLOP per token."""

    def __init__(self, decode_tflops: float, cap: PowerCap = RAMP, step_s: float = 0.05) -> None:
        super().__init__(cap, step_s=step_s)
        self.rate, self.tflop_per_token = decode_tflops, 0.1 * step_s / 640  # its own rate: 100 TFLOP/s

    def decode_tflops(self, shape: BatchShape) -> float:
        return self.rate if shape.decode_seqs else 0.0


def test_the_ramp_runs_from_onset_to_full_rate_and_is_off_without_its_fields() -> None:
    assert [RAMP.decode_share(x) for x in (0.0, 100.0, 200.0, 300.0, 900.0)] == [0.0, 0.0, 0.5, 1.0, 1.0]
    assert RAMP.has_decode_cap and not CAP.has_decode_cap and CAP.decode_share(1e6) == 0.0


def test_a_prompt_beside_steady_heavy_decoding_runs_at_the_capped_clock_and_decoding_alone_does_not() -> None:
    clock = PowerClock()
    assert clock.end(RateCost(900.0), DECODE, 0.0, 0.02) == 0.02  # decode-only steps keep their price
    clock.end(RateCost(900.0), PROMPT_BESIDE, 0.0, 0.05)  # the state climbs while decoders run at 900
    end = clock.end(RateCost(900.0), PROMPT_BESIDE, 10.0, 10.05)  # after 10 s of such decoding
    assert end - 10.0 == pytest.approx(0.05 * 1.2)
    assert PowerClock().end(RateCost(50.0), PROMPT_BESIDE, 10.0, 10.05) == 10.05  # light decoding: full clock


def test_prompt_steps_own_rate_counts_by_its_weight_in_the_state() -> None:
    """Back-to-back prompt steps with no decoders: at their own 800 TFLOP/s the state climbs past
    the ramp's top (capped); weighted 0.25 it settles at 200, half way up the ramp."""
    lone = BatchShape.from_chunks([(640, 0)], [])

    def settled(cap: PowerCap) -> float:
        clock, cost = PowerClock(), RateCost(0.0, cap=cap)
        cost.tflop_per_token = 800.0 * 0.05 / 640  # 800 TFLOP/s over a 0.05 s step
        ends = [clock.end(cost, lone, 0.05 * i, 0.05 * (i + 1)) - 0.05 * i for i in range(200)]
        return ends[-1]

    assert settled(RAMP) == pytest.approx(0.05 * 1.2)
    assert settled(dataclasses.replace(RAMP, prompt_rate_weight=0.25)) == pytest.approx(0.05 * 1.1, rel=1e-3)
    with pytest.raises(ValueError, match="prompt_rate_weight"):
        dataclasses.replace(RAMP, prompt_rate_weight=0.0)


def test_the_tensor_rate_state_cools_over_idle_time() -> None:
    clock = PowerClock()
    clock.end(RateCost(900.0), PROMPT_BESIDE, 0.0, 0.05)
    hot = clock.rate
    lone = BatchShape.from_chunks([(512, 0)], [])
    clock.end(RateCost(900.0), lone, 0.05 + 0.1, 0.2)  # no decoders: the 0.1 s gap was idle
    assert hot > 100.0 and clock.rate < hot * math.exp(-1.0) + 100.0


def test_the_tensor_rate_terms_are_checked_and_loaded(tmp_path: Path) -> None:
    terms = {"full_clock_ratio": 0.9, "capped_ratio": 1.1, "budget_s": 0.05, "refill": 0.5, "heavy_tokens": 2048}
    with pytest.raises(ValueError, match="decode_onset_tflops"):
        PowerCap(**terms, decode_onset_tflops=300.0, decode_full_tflops=100.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="decode_tau_s"):
        PowerCap(**terms, decode_onset_tflops=1.0, decode_full_tflops=2.0, decode_tau_s=0.0)  # type: ignore[arg-type]
    ramp = {"decode_onset_tflops": 80.0, "decode_full_tflops": 340.0, "decode_tau_s": 0.085}
    (tmp_path / "power.json").write_text(json.dumps({**terms, "decode_cap": ramp}))
    cap = load_power_cap(tmp_path)
    assert cap is not None
    assert (cap.decode_onset_tflops, cap.decode_full_tflops, cap.decode_tau_s) == (80.0, 340.0, 0.085)
    (tmp_path / "power.json").write_text(json.dumps({**terms, "decode_cap": {**ramp, "rate_weights": {"int4": 0.66}}}))
    weighted = load_power_cap(tmp_path)
    assert weighted is not None and weighted.rate_weight("int4") == 0.66
    assert weighted.rate_weight("bf16") == 1.0 and weighted.rate_weight("fp8") is None
    assert weighted.prompt_rate_weight == 1.0  # absent: every step's own rate counts whole
    (tmp_path / "power.json").write_text(json.dumps({**terms, "decode_cap": {**ramp, "prompt_rate_weight": 0.46}}))
    prompt = load_power_cap(tmp_path)
    assert prompt is not None and prompt.prompt_rate_weight == 0.46
    with pytest.raises(ValueError, match="rate_weights"):
        PowerCap(**terms, rate_weights=(("int3", 0.5),))  # type: ignore[arg-type]
    (tmp_path / "power.json").write_text(json.dumps({**terms, "decode_cap": {"decode_onset_tflops": 80.0}}))
    with pytest.raises(ValueError, match=r"power\.json.*fit_power"):
        load_power_cap(tmp_path)


def test_decode_tflops_follows_the_model_size_and_counts_unmeasured_fp8_work_at_half() -> None:
    from latsim.catalog.lookup import load_device, load_model
    from latsim.costmodel.calibrated import load_calibrated

    h200 = load_device("h200")
    small, big = (load_calibrated(load_model(m), h200, 1, "bf16", "bf16") for m in ("llama-3.1-8b", "qwen2.5-32b"))
    small.power = big.power = RAMP  # no measured class weights
    batch = BatchShape(decode_seqs=128, decode_kv_tokens=128 * 640)
    assert 0.0 < small.decode_tflops(batch) < big.decode_tflops(batch)
    assert small.decode_tflops(BatchShape()) == 0.0
    fp8 = load_calibrated(load_model("llama-3.1-8b"), h200, 1, "fp8", "bf16")
    fp8.power = RAMP
    assert fp8.tflop_per_token == pytest.approx(small.tflop_per_token / 2, rel=0.01)  # no measured weight: peaks
    int4 = load_calibrated(load_model("llama-3.1-8b"), h200, 1, "int4", "bf16")
    int4.power = dataclasses.replace(RAMP, rate_weights=(("int4", 0.5),))
    assert int4.gemm_class == "int4" and int4.tflop_per_token == pytest.approx(small.tflop_per_token / 2)


def test_a_light_step_uses_its_class_s_measured_light_ratio() -> None:
    cap = dataclasses.replace(RAMP, gemm_ratios=(("int4", 0.85, 0.98),), light_ratios=(("int4", 1.09),))
    assert cap.ratios("int4") == (0.85, 0.98) and cap.ratios("int4", light=True) == (0.85, 1.09)
    assert cap.ratios("bf16", light=True) == (1.0, 1.2)  # no light entry: the pair's
    with pytest.raises(ValueError, match="light_ratios"):
        dataclasses.replace(RAMP, light_ratios=(("int4", 3.0),))
