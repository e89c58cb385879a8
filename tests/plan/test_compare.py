"""``latsim compare``: the JSON contract, knees, figure and a self-contained HTML report."""

from __future__ import annotations

import json
import re

import pytest

from latsim.cli.parsing import rates
from latsim.plan.compare import knee_rate, slo_rate

ARGS = ["--model", "llama-3.2-1b", "--devices", "h100,l40s", "--qps", "2:32:3", "--num-requests", "120",
        "--input-len", "256", "--output-len", "32", "--replications", "2"]


def _point(qps: float, p99: float, stable: bool = True, meets: bool | None = None) -> dict:
    return {"qps": qps, "ttft_ms": {"p99": p99}, "stable": stable, "meets_slo": meets}


def test_knee_is_last_rate_before_p99_departs() -> None:
    curve = [_point(1, 100), _point(2, 150), _point(4, 199), _point(8, 201), _point(16, 180)]
    assert knee_rate(curve) == 4
    assert knee_rate([_point(1, 100), _point(2, 120, stable=False)]) == 1
    assert knee_rate([_point(1, 100, stable=False)]) is None


def test_slo_rate_needs_every_lower_rate_to_meet() -> None:
    curve = [_point(1, 1, meets=True), _point(2, 1, meets=True), _point(4, 1, meets=False), _point(8, 1, meets=True)]
    assert slo_rate(curve) == 2
    assert slo_rate([_point(1, 1, meets=False)]) is None


def test_slo_rate_at_the_live_edge_is_none_where_no_band_applies() -> None:
    curve = [{**_point(1, 1, meets=True), "meets_slo_at_live_edge": True},
             {**_point(2, 1, meets=True), "meets_slo_at_live_edge": False}]
    assert slo_rate(curve, "meets_slo_at_live_edge") == 1 and slo_rate(curve) == 2
    unknown = [{**_point(1, 1, meets=True), "meets_slo_at_live_edge": None}]
    assert slo_rate(unknown, "meets_slo_at_live_edge") is None


def test_slo_rate_at_the_live_edge_stops_where_the_band_stops_reaching() -> None:
    # a curve that runs past the band's loads: unknown points after the last rate it vouches for
    curve = [{**_point(1, 1, meets=True), "meets_slo_at_live_edge": True},
             {**_point(2, 1, meets=True), "meets_slo_at_live_edge": True},
             {**_point(4, 1, meets=False, stable=False), "meets_slo_at_live_edge": None},
             {**_point(8, 1, meets=True), "meets_slo_at_live_edge": True}]
    assert slo_rate(curve, "meets_slo_at_live_edge") == 2
    curve[2]["meets_slo_at_live_edge"] = None
    curve[2]["meets_slo"] = True
    assert slo_rate(curve, "meets_slo_at_live_edge") == 2 and slo_rate(curve) == 8


def test_an_h200_curve_is_also_checked_at_the_live_error_bands_slow_edge(cli, tmp_path) -> None:
    page = tmp_path / "c.html"
    code, out, _ = cli("compare", "--model", "llama-3.2-1b", "--devices", "h200,a100", "--qps", "2:8:2",
                       "--num-requests", "80", "--input-len", "256", "--output-len", "32", "--replications", "2",
                       "--slo", "ttft_p99_ms=5000,tpot_p99_ms=100", "--html", str(page), "--json")
    assert code == 0
    devices = json.loads(out)["devices"]
    h200, a100 = devices["h200"], devices["a100"]
    assert all(p["meets_slo_at_live_edge"] is not None for p in h200["curve"])
    assert h200["max_rps_at_slo_live_edge"] is not None
    assert h200["max_rps_at_slo_live_edge"] <= h200["max_rps_at_slo"]
    assert all(p["meets_slo_at_live_edge"] is None for p in a100["curve"]) and a100["max_rps_at_slo_live_edge"] is None
    assert "the same at the live error band" in page.read_text()


def test_rate_ranges() -> None:
    assert rates("--qps", "1:16:5") == pytest.approx((1, 2, 4, 8, 16))
    assert rates("--qps", "4,2,8") == (2, 4, 8)
    assert len(rates("--qps", "1:20")) == 8


def test_compare_json_figure_and_html(cli, tmp_path) -> None:
    png, page = tmp_path / "c.png", tmp_path / "c.html"
    code, out, _ = cli("compare", *ARGS, "--slo", "ttft_p99_ms=500,tpot_p99_ms=20", "--plot", str(png),
                       "--html", str(page), "--json")
    assert code == 0
    answer = json.loads(out)
    assert set(answer["devices"]) == {"h100", "l40s"}
    for d in answer["devices"].values():
        assert [p["qps"] for p in d["curve"]] == pytest.approx([2, 8, 32])
        assert {"qps", "ttft_ms", "tpot_ms", "stable"} <= set(d["curve"][0])
        assert {"knee_rps", "max_rps_at_slo", "usd_per_million_output_tokens"} <= set(d)
    h100, l40s = answer["devices"]["h100"], answer["devices"]["l40s"]
    assert h100["curve"][0]["tpot_ms"]["p50"] < l40s["curve"][0]["tpot_ms"]["p50"]
    if h100["max_rps_at_slo"]:
        expected = h100["usd_per_hour"] / (h100["max_rps_at_slo"] * 32 * 3600) * 1e6
        assert h100["usd_per_million_output_tokens"] == pytest.approx(expected)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = page.read_text()
    assert "data:image/png;base64," in text
    assert not re.search(r"""(src|href)=["']?(https?:|file:|/)""", text), "the report must not load anything"
    assert "h100" in text and "l40s" in text


@pytest.mark.parametrize(("args", "words"), [
    (["--qps", "1:0"], "rates must be finite numbers > 0, got 0"),
    (["--qps", "5:2"], "the high rate must exceed the low rate"),
    (["--qps", "0:5"], "finite numbers > 0"),
    (["--qps", "fast"], "'fast' is not a request rate"),
    (["--devices", "h100,l40"], "unknown device 'l40'"),
    (["--slo", "ttft_p98_ms=5"], "does not exist"),
    (["--price", "h100=free"], "'free' is not a number"),
    (["--devices", "h100:pp=2"], "'pp=2' is not KEY=VALUE"),
    (["--devices", "h100:tp=two"], "'two' is not a valid tp"),
])
def test_bad_input_is_one_line_exit_2(cli, args, words) -> None:
    code, _, err = cli("compare", "--model", "llama-3.2-1b", "--num-requests", "20", *args)
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1


def test_rates_past_two_unstable_points_get_one_replication(monkeypatch) -> None:
    from latsim.config import Settings
    from latsim.plan import compare as module

    used = []

    def fake_point(deployment, settings, slo, replications, min_p_meet):
        used.append(replications)
        return {"qps": settings.qps, "stable": settings.qps < 3}

    monkeypatch.setattr(module, "_point", fake_point)
    curve = module._curve(None, Settings(), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0), None, 3, 0.8)
    assert [p["qps"] for p in curve] == [1, 2, 3, 4, 5, 6]
    assert used == [3, 3, 3, 3, 1, 1]


def test_configurations_side_by_side(cli) -> None:
    code, out, _ = cli("compare", "--model", "llama-3.2-1b", "--devices", "h100,h100:tp=2:weight_dtype=fp8",
                       "--qps", "2,8", "--num-requests", "60", "--input-len", "128", "--output-len", "16",
                       "--replications", "1", "--json")
    assert code == 0
    devices = json.loads(out)["devices"]
    assert list(devices) == ["h100", "h100:tp=2:weight_dtype=fp8"]
    one, two = devices.values()
    assert (one["tp"], one["weight_dtype"], two["tp"], two["weight_dtype"]) == (1, "bf16", 2, "fp8")
    assert two["device"] == "h100" and two["usd_per_hour"] == pytest.approx(2 * one["usd_per_hour"])


def test_cost_source_carries_the_transfer_uncertainty_only_without_measurements() -> None:
    from latsim import Deployment, load_device, load_model
    from latsim.plan.compare import cost_source

    model = load_model("llama-3.1-8b")
    measured = cost_source(Deployment(model=model, device=load_device("h200")))
    assert measured["cost_source"].startswith("measured here") and "kernel_uncertainty_pct" not in measured
    roofline = cost_source(Deployment(model=model, device=load_device("mi300x")))
    assert roofline["cost_source"] == "roofline"
    assert {"gemm", "attn_decode"} <= set(roofline["kernel_uncertainty_pct"])
    assert all(v["worst_ape_pct"] >= v["median_ape_pct"] > 0 for v in roofline["kernel_uncertainty_pct"].values())
