"""latsim.validate.error_band: the held-out error band, its left-out coverage, and when it applies."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from latsim.validate import error_band as eb


def _errors(groups: dict[str, list[float]], level: str = "f0.25", metric: str = "ttft_ms", stat: str = "p50",
            host_ratio: float = 0.5) -> pd.DataFrame:
    rows = [{"run": f"root/start/{g}/{level}-{k}", "level": level, "metric": metric, "stat": stat, "error": e,
             "host_ratio": host_ratio} for g, errs in groups.items() for k, e in enumerate(errs)]
    return pd.DataFrame(rows)


def _exchangeable(rng: np.random.Generator, groups: int, per_group: int) -> tuple[pd.Series, pd.Series]:
    """Errors of ``groups`` configurations, each with its own offset (sd 0.05) and level noise (sd 0.05)."""
    offsets = rng.normal(0.0, 0.05, groups)
    errors = np.concatenate([rng.normal(o, 0.05, per_group) for o in offsets])
    names = np.repeat([f"c{g}" for g in range(groups)], per_group)
    return pd.Series(errors), pd.Series(names)


def test_left_out_coverage_of_the_plain_10_90_band_falls_short_of_80_percent() -> None:
    """A simulation study: configurations drawn alike, each with its own offset; the 10-90 % band of
    the others holds a left-out configuration's levels less often than 80 %."""
    rng = np.random.default_rng(7)
    covers = [eb.loo_coverage(*_exchangeable(rng, groups=25, per_group=6)) for _ in range(40)]
    assert 0.74 <= float(np.mean(covers)) <= 0.79


def test_the_calibrated_band_holds_80_percent_of_new_configurations() -> None:
    """A simulation study: a band calibrated on 20 configurations, then 200 new configurations drawn
    from the same process; over 30 such studies, the share of the new levels inside is at least
    the target, less the study's own error."""
    rng = np.random.default_rng(11)
    shares = []
    for _ in range(30):
        errors, groups = _exchangeable(rng, groups=20, per_group=5)
        band = eb.calibrated_band(errors, groups)
        assert band["coverage"] is not None and band["coverage"] >= eb.TARGET
        fresh, _ = _exchangeable(rng, groups=200, per_group=5)
        shares.append(float(((fresh >= band["low"]) & (fresh <= band["high"])).mean()))
    assert float(np.mean(shares)) >= eb.TARGET - 0.02


def test_a_band_that_cannot_reach_the_target_takes_the_whole_range_and_says_so() -> None:
    errors = pd.Series([0.0, 0.1, 0.2, 1.0, 1.1, 1.2])
    groups = pd.Series(["a"] * 3 + ["b"] * 3)
    band = eb.calibrated_band(errors, groups)
    assert band["tail"] == 0.0 and band["coverage"] == 0.0
    assert (band["low"], band["high"]) == (0.0, 1.2)
    lone = eb.calibrated_band(pd.Series([0.0, 0.5, 1.0]), pd.Series(["a"] * 3))
    assert lone["coverage"] is None and lone["tail"] == 0.1


def test_a_configuration_unlike_the_others_falls_outside_their_band() -> None:
    rng = np.random.default_rng(3)
    errors, names = _exchangeable(rng, groups=20, per_group=5)
    errors = pd.concat([errors, pd.Series([0.9] * 5)], ignore_index=True)
    names = pd.concat([names, pd.Series(["far"] * 5)], ignore_index=True)
    inside = eb.loo_inside(errors, names)
    assert not inside[names == "far"].any()
    assert 0.6 <= inside[names != "far"].mean() <= 0.95
    assert eb.loo_coverage(errors, names) == pytest.approx(inside.mean())
    assert eb.loo_coverage(pd.Series([0.1, 0.2]), pd.Series(["one", "one"])) is None


def test_summarise_bands_levels_by_load_and_pace_and_takes_quantiles_per_metric() -> None:
    light = _errors({"a-mix": [0.0, 0.1, 0.2, 0.3, 0.4], "b-mix": [0.5, 0.6, 0.7, 0.8, 0.9]})
    heavy = _errors({"a-mix": [-0.2], "b-mix": [-0.1]}, level="f0.90")
    host_paced = _errors({"c-mix": [0.7], "d-mix": [0.7]}, host_ratio=1.8)
    lone = _errors({"a-mix": [0.3, 0.4]}, level="f0.90", host_ratio=0.1)  # one configuration: no cell
    burst = _errors({"a-mix": [5.0]}, level="burst")
    other = _errors({"a-mix": [5.0]}, stat="mean")
    no_ratio = _errors({"a-mix": [5.0]}, host_ratio=float("nan"))
    bands = eb.summarise(pd.concat([light, heavy, host_paced, lone, burst, other, no_ratio], ignore_index=True))
    assert {b: set(p) for b, p in bands.items()} == {"light": {"mixed", "host"}, "heavy": {"mixed"}}
    cell = bands["light"]["mixed"]["ttft_ms p50"]
    assert (cell["levels"], cell["configurations"]) == (10, 2)
    assert cell["median"] == pytest.approx(0.45)
    assert cell["coverage"] == 0.0 and cell["tail"] == 0.0  # each half lies outside the other's band
    assert (cell["low"], cell["high"]) == (pytest.approx(0.0), pytest.approx(0.9))
    assert bands["heavy"]["mixed"]["ttft_ms p50"]["levels"] == 2
    assert bands["heavy"]["mixed"]["ttft_ms p50"]["coverage"] == 0.0  # each one outside the other's
    assert bands["light"]["host"]["ttft_ms p50"]["median"] == pytest.approx(0.7)


@pytest.mark.parametrize(("decode", "prompt", "pace"), [
    (0.1, None, "gpu"), (0.1, 0.9, "gpu"), (0.5, 0.99, "mixed"), (0.1, 1.6, "launch"), (0.5, 1.2, "launch"),
    (1.8, 2.5, "host"), (1.8, None, "host"), (None, 1.6, None), (float("nan"), 1.6, None), (0.5, float("nan"), "mixed"),
])
def test_the_pace_is_the_decodes_unless_the_prompt_steps_launch_outlasts_their_kernels(
        decode: float | None, prompt: float | None, pace: str | None) -> None:
    assert eb.pace_of(decode, prompt) == pace


def test_summarise_puts_launch_paced_levels_in_a_cell_of_their_own() -> None:
    gpu = _errors({"a-mix": [0.0, 0.1], "b-mix": [0.2, 0.3]}, host_ratio=0.1)
    launch = _errors({"c-mix": [0.5, 0.6], "d-mix": [0.7, 0.8]}, host_ratio=0.1).assign(prompt_ratio=1.7)
    bands = eb.summarise(pd.concat([gpu, launch], ignore_index=True))
    assert set(bands["light"]) == {"gpu", "launch"}
    assert bands["light"]["launch"]["ttft_ms p50"]["median"] == pytest.approx(0.65)
    assert bands["light"]["gpu"]["ttft_ms p50"]["median"] == pytest.approx(0.15)


@pytest.mark.parametrize(("fraction", "band"), [(0.1, "light"), (0.5, "light"), (0.75, "heavy"), (0.9, "heavy"),
                                                (0.95, "heavy"), (0.96, None), (0.0, None)])
def test_load_bands(fraction: float, band: str | None) -> None:
    assert eb.band_of(fraction) == band


@pytest.mark.parametrize(("ratio", "pace"), [(0.1, "gpu"), (0.25, "gpu"), (0.55, "mixed"), (1.0, "mixed"),
                                             (1.7, "host"), (0.0, None)])
def test_decode_paces(ratio: float, pace: str | None) -> None:
    assert eb.band_of(ratio, eb.PACES) == pace


def _band() -> eb.ErrorBand:
    cell = {"levels": 10, "configurations": 3, "median": 0.0, "tail": 0.05, "low": -0.1, "high": 0.2,
            "coverage": 0.8}
    return eb.ErrorBand(engine="vllm-0.25.1", device="h200", cost_model="calibrated", tp=1,
                        bands={"light": {"mixed": {"ttft_ms p50": cell}},
                               "heavy": {"mixed": {"ttft_ms p50": cell}, "gpu": {"ttft_ms p50": cell}}},
                        levels=20, known_host={"light": {"mixed": {"ttft_ms p50": {**cell, "low": -0.05}}}},
                        known_host_levels=10)


MEASURED = {"engine": "vllm", "device": "h200", "cost_model": "calibrated", "tp": 1, "replicas": 1,
            "saturation": 0.4, "default_scheduling": True, "host_ratio": 0.5}


@pytest.mark.parametrize(("change", "why"), [
    ({"engine": "sglang"}, "on vllm only"), ({"device": "a100"}, "from h200, h100 runs only"),
    ({"cost_model": "roofline"}, "calibrated cost model only"), ({"tp": 2}, "TP=1 only"),
    ({"replicas": 2}, "one engine"), ({"default_scheduling": False}, "default scheduling"),
    ({"saturation": 1.3}, "outside the measured"), ({"saturation": None}, "no load estimate"),
    ({"host_ratio": 0.1}, "host/GPU pace"), ({"host_ratio": None}, "host/GPU pace"),
    ({"bitsandbytes": True}, "no live run measured them"),
])
def test_the_band_applies_only_to_what_was_measured(change: dict, why: str) -> None:
    out = eb.validated_error(_band(), **{**MEASURED, **change})
    assert out["available"] is False and why in out["why"]


def test_a_prediction_given_its_host_speed_gets_the_probed_levels_band() -> None:
    known = eb.validated_error(_band(), **{**MEASURED, "host_known": True})
    unknown = eb.validated_error(_band(), **MEASURED)
    assert known["host_known"] is True and known["metrics"]["ttft_ms p50"]["low"] == -0.05
    assert unknown["host_known"] is False and unknown["metrics"]["ttft_ms p50"]["low"] == -0.1
    heavy = eb.validated_error(_band(), **{**MEASURED, "host_known": True, "saturation": 0.8})
    assert heavy["available"] is False  # the probed levels have no heavy cell here
    lone = eb.ErrorBand(**{**_band().__dict__, "known_host": {}, "known_host_levels": 0})
    assert eb.validated_error(lone, **{**MEASURED, "host_known": True})["host_known"] is False


def test_a_measured_deployment_gets_its_load_band() -> None:
    out = eb.validated_error(_band(), **{**MEASURED, "saturation": 0.8, "host_ratio": 0.2})
    assert out["available"] and (out["band"], out["pace"]) == ("heavy", "gpu")
    assert out["metrics"]["ttft_ms p50"]["high"] == 0.2 and out["host_ratio"] == 0.2


def test_a_launch_paced_deployment_gets_no_decode_paced_band() -> None:
    """A mixture of experts decoding at GPU pace whose prompt steps wait on the CPU's launch is not
    described by the GPU-paced levels: without a launch cell the band says so."""
    out = eb.validated_error(_band(), **{**MEASURED, "saturation": 0.8, "host_ratio": 0.2, "prompt_ratio": 1.6})
    assert out["available"] is False and "host/GPU pace" in out["why"]


def test_the_shipped_band_reads_and_describes_the_calibrated_h200() -> None:
    band = eb.ErrorBand.read()
    assert (band.device, band.cost_model, band.tp) == ("h200", "calibrated", 1)
    assert 100 <= band.known_host_levels < band.levels
    for name in ("light", "heavy"):
        for pace, table in itertools.product(("gpu", "mixed", "host"), (band.bands, band.known_host)):
            cell = table[name][pace]["tpot_ms p50"]
            assert cell["levels"] >= 10 and cell["low"] < cell["median"] < cell["high"]
            assert cell["coverage"] is None or 0.0 <= cell["coverage"] <= 1.0


@pytest.mark.parametrize("device", eb.band_devices())
def test_the_shipped_band_is_of_the_current_model(device: str) -> None:
    """Each file keeps a few levels' predictions; a model change since it was written shows here
    (then run ``python scripts/error_band.py --device DEVICE --write`` again)."""
    from latsim.validate.compare import compare_run

    doc = json.loads(eb.band_path(device).read_text())
    assert doc["device"] == device
    assert doc["sentinels"]
    for level, kept in doc["sentinels"].items():
        predicted = compare_run(level, doc["device"]).predicted
        for key, value in kept.items():
            metric, stat = key.split()
            assert predicted[metric][stat] == pytest.approx(value, rel=1e-5), (
                f"{level} {key}: the model changed since {eb.band_path(device).name} was written; "
                f"run python scripts/error_band.py --device {device} --write")


def test_the_slow_edge_divides_by_one_plus_the_most_negative_error() -> None:
    validated = eb.validated_error(_band(), **MEASURED)  # ttft p50 band: -0.1 .. +0.2
    summary = {"slo": {"percentile": "p50", "targets_ms": {"ttft_ms": 100.0}}, "ttft_ms": {"p50": 95.0}}
    edge = eb.slow_edge(validated, summary)  # 95 ms predicted meets 100; at the slow edge, 105.6 does not
    assert edge == {"ttft_ms": {"percentile_ms": pytest.approx(95.0 / 0.9), "target_ms": 100.0, "met": False}}
    assert eb.slow_edge(validated, {**summary, "ttft_ms": {"p50": 80.0}})["ttft_ms"]["met"] is True
    assert eb.slow_edge(validated, {"ttft_ms": {"p50": 85.0}}) is None  # no SLO
    assert eb.slow_edge({"available": False, "why": "x"}, summary) is None
    p90 = {**summary, "slo": {"percentile": "p90", "targets_ms": {"ttft_ms": 100.0}}, "ttft_ms": {"p90": 1.0}}
    assert eb.slow_edge(validated, p90) is None  # no band at that percentile


def test_inside_band_counts_the_levels_of_each_metric_inside_their_cells_band() -> None:
    errors = pd.concat([_errors({"a-mix": [-0.2, 0.0, 0.1, 0.3]}),  # light, mixed: band -0.1 .. 0.2
                        _errors({"a-mix": [0.0]}, host_ratio=0.1),  # light, gpu: no such cell, not counted
                        _errors({"a-mix": [0.0]}, level="burst")], ignore_index=True)
    counts = eb.inside_band(errors, _band())
    assert counts.to_dict("records") == [{"metric": "ttft_ms p50", "inside": 2, "levels": 4}]
    known = eb.inside_band(errors, _band(), host_known=True)  # band -0.05 .. 0.2
    assert known.to_dict("records") == [{"metric": "ttft_ms p50", "inside": 2, "levels": 4}]
    assert eb.inside_band(errors.iloc[:0], _band()).empty


def test_plan_targets_at_the_slow_edge_cover_what_the_band_covers() -> None:
    validated = eb.validated_error(_band(), **MEASURED)  # ttft p50: low -0.1
    live = eb.targets_at_slow_edge(validated, {"ttft_p50_ms": 95.0, "itl_p99_ms": 5.0},
                                   {"ttft_p50_ms": 100.0, "itl_p99_ms": 10.0})
    assert live == {"meets": False, "values": {"ttft_p50_ms": pytest.approx(95.0 / 0.9)}}  # itl: no band
    assert eb.targets_at_slow_edge(validated, {"ttft_p50_ms": 80.0}, {"ttft_p50_ms": 100.0})["meets"] is True
    none = eb.targets_at_slow_edge(validated, {"itl_p99_ms": 5.0}, {"itl_p99_ms": 10.0})
    assert none["meets"] is None and "covers none" in none["why"]
    away = eb.targets_at_slow_edge({"available": False, "why": "measured live on h200 only"},
                                   {"ttft_p50_ms": 1.0}, {"ttft_p50_ms": 2.0})
    assert away == {"meets": None, "why": "measured live on h200 only"}
    unfinished = eb.targets_at_slow_edge(validated, {"ttft_p50_ms": None}, {"ttft_p50_ms": 100.0})
    assert unfinished["meets"] is False


@pytest.mark.parametrize(("executor", "tp", "described"), [(None, 1, True), ("uni", 1, True), ("mp", 1, False)])
def test_the_band_describes_the_engines_default_executor_only(executor, tp, described) -> None:
    from latsim.catalog.lookup import load_device, load_model
    from latsim.deployment import Deployment, EngineConfig

    deployment = Deployment(model=load_model("llama-3.1-8b"), device=load_device("h200"), tp=tp,
                            engine=EngineConfig(executor=executor))
    why = eb.deployment_why(deployment, "calibrated", _band())
    assert (why == "") is described and (described or "executor" in why)


@pytest.mark.parametrize(("method", "described"), [("bitsandbytes", False), ("gptq", True), (None, True)])
def test_the_band_leaves_out_bitsandbytes_weights_only(method, described) -> None:
    from latsim.catalog import parse_hf_config
    from latsim.catalog.lookup import load_device
    from latsim.deployment import Deployment

    config = json.loads((eb.Path(__file__).parents[2] / "latsim/data/catalog/models/llama-3.1-8b.json").read_text())
    if method == "bitsandbytes":
        config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    elif method == "gptq":
        config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    deployment = Deployment(model=parse_hf_config(config, "m"), device=load_device("h200"))
    why = eb.deployment_why(deployment, "calibrated", _band())
    assert (why == "") is described and (described or "bitsandbytes" in why)


def test_each_gpu_with_live_runs_has_its_band_file_and_the_rest_fall_back_to_the_h200s() -> None:
    assert eb.band_path("h200") == eb.SHIPPED and eb.band_path("h100").name == "error_band-h100.json"
    assert eb.band_devices()[0] == "h200" and "h100" in eb.band_devices()
    h100 = eb.shipped_band("h100")
    assert (h100.device, h100.tp, h100.cost_model) == ("h100", 1, "calibrated")
    assert eb.shipped_band("a100").device == "h200"  # no live runs: its kind check says so
    kind = {k: v for k, v in MEASURED.items() if k not in ("saturation", "host_ratio")}
    assert "h200, h100 runs only" in eb.kind_why(h100, **{**kind, "device": "a100"})


def test_only_the_h200_counts_runs_that_recorded_no_gpu() -> None:
    """Runs from before the GPU was recorded were all taken on the lent H200."""
    assert eb.band_measured_on(None, "h200") and not eb.band_measured_on(None, "h100")
    assert eb.band_measured_on("h100", "h100") and not eb.band_measured_on("h200", "h100")


def test_a_cell_of_one_configuration_is_left_out() -> None:
    """One configuration leaves nothing to leave out: no coverage says how far its band carries."""
    one = _errors({"a-mix": [0.1, 0.2, 0.3]})
    assert eb.summarise(one) == {}
    two = _errors({"a-mix": [0.1, 0.2], "b-mix": [0.3]})
    assert eb.summarise(two)["light"]["mixed"]["ttft_ms p50"]["configurations"] == 2
