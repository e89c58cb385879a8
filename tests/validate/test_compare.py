"""``latsim validate``: replaying committed runs, the signed error table, client-bound runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from latsim.engines.vllm.host_terms import reference_probe_s
from latsim.validate.compare import (
    CLIENT_LAG_LIMIT_S,
    METRICS,
    STATS,
    client_bound,
    compare_run,
    error_table,
    headline,
    host_probe_ms,
    host_speed_option,
    run_host_speed,
)
from tests.cli_runner import run_cli as cli

DATA = Path(__file__).resolve().parents[2] / "data" / "validation" / "h200"
SMALL_RUN = DATA / "llama-2-7b-mix" / "f0.25"  # 119 requests
CLIENT_BOUND_RUN = DATA.parent / "h200-tp2" / "llama-3.1-8b-fixed-in512-out128" / "f0.75"  # send lag p99 0.25 s




def test_replay_gives_signed_errors_for_every_metric_and_statistic() -> None:
    level = compare_run(SMALL_RUN, "h200")
    table = error_table([level])
    assert len(table) == len(METRICS) * len(STATS) and not table["client_bound"].any()
    row = table[(table["metric"] == "ttft_ms") & (table["stat"] == "p50")].iloc[0]
    assert row["error"] == pytest.approx((row["predicted"] - row["measured"]) / row["measured"])
    assert row["measured"] == pytest.approx(level.measured["ttft_ms"]["p50"])
    assert len(level.predicted_records) == len(level.measured_records) == 119
    assert table["host_probe_ms"].isna().all()  # measured before the probe existed


def test_host_probe_time_is_carried_into_the_error_table() -> None:
    probed = DATA.parent / "h200-probed-b" / "llama-3.1-8b-mix" / "f0.25"
    meta = json.loads((probed / "meta.json").read_text())
    expected = meta["host_probe"]["summary"]["probe_p50_s"] * 1e3
    assert host_probe_ms(meta) == pytest.approx(expected) and 0.5 < expected < 5
    assert host_probe_ms({}) is None and host_probe_ms({"host_probe": {"summary": {"samples": 0}}}) is None
    table = error_table([compare_run(probed, "h200")])
    assert table["host_probe_ms"].eq(host_probe_ms(meta)).all()


def test_replay_host_speed_from_the_probe() -> None:
    meta = {"host_probe": {"summary": {"probe_p50_s": 2 * reference_probe_s()}}}
    assert run_host_speed(meta, "probe") == pytest.approx(0.5)
    assert run_host_speed({}, "probe") == 1.0  # measured without the probe
    assert run_host_speed(meta, 0.8) == 0.8
    with pytest.raises(ValueError, match="'fast'"):
        run_host_speed(meta, "fast")
    for level, probe_ms in (("h200-probed-b/llama-3.2-1b-fixed-in512-out128/f0.90", 2.03),
                            ("h200-probed-c/llama-3.2-1b-fixed-in512-out128/f0.25", 1.61)):
        speed = reference_probe_s() * 1e3 / probe_ms  # the 1B's TPOT follows its host (host-bound)
        at_one, probed = compare_run(DATA.parent / level, "h200"), compare_run(DATA.parent / level, "h200",
                                                                                host_speed="probe")
        ratio = probed.predicted["tpot_ms"]["p50"] / at_one.predicted["tpot_ms"]["p50"]
        # at least the CPU's own change, in its direction (queueing can add to it near capacity)
        assert (ratio - 1) / (1 / speed - 1) > 0.9
        assert probed.measured == at_one.measured


def test_client_bound_runs_are_flagged_and_can_be_left_out() -> None:
    assert client_bound({"load": {"mode": "open"}, "send_lag_s": {"p99": CLIENT_LAG_LIMIT_S * 2}})
    assert not client_bound({"load": {"mode": "open"}, "send_lag_s": {"p99": CLIENT_LAG_LIMIT_S / 2}})
    assert not client_bound({"load": {"mode": "burst"}, "send_lag_s": {"p99": 1.0}})
    assert not client_bound({})
    table = pd.DataFrame({"run": ["a", "b"], "level": ["f0.25", "f0.50"], "client_bound": [False, True],
                          "metric": ["ttft_ms"] * 2, "stat": ["p50"] * 2, "error": [0.1, -0.9]})
    assert headline(table).loc["ttft_ms", "p50"] == pytest.approx(0.5)
    assert headline(table, engine_bound_only=True).loc["ttft_ms", "p50"] == pytest.approx(0.1)


def test_cli_reports_client_bound_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["validate", str(CLIENT_BOUND_RUN), "--device", "h200"], monkeypatch, capsys)
    assert code == 0
    assert "client-bound runs" in out and "client-bound runs left out" in out


def test_cli_json_and_bad_path(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                               tmp_path: Path) -> None:
    code, out, _ = cli(["validate", str(SMALL_RUN), "--device", "h200", "--json"], monkeypatch, capsys)
    rows = json.loads(out)
    assert code == 0 and len(rows) == len(METRICS) * len(STATS)
    code, _, err = cli(["validate", str(tmp_path / "missing"), "--device", "h200"], monkeypatch, capsys)
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1
    for bad in ("fast", "50"):  # not a number, out of range: one line naming it and what is accepted
        code, _, err = cli(["validate", str(SMALL_RUN), "--host-speed", bad], monkeypatch, capsys)
        assert code == 2 and f"--host-speed {bad!r}" in err and "'probe' or a number in [0.1, 10]" in err


def test_host_speed_option_reads_probe_or_a_number_in_range() -> None:
    assert host_speed_option("probe") == "probe" and host_speed_option("0.75") == 0.75
    for bad in ("fast", "0", "11", "nan"):
        with pytest.raises(ValueError, match="expected 'probe' or a number"):
            host_speed_option(bad)


def test_cli_counts_the_levels_inside_the_live_error_band(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["validate", str(SMALL_RUN), "--device", "h200"], monkeypatch, capsys)
    assert code == 0 and "inside the live error band `latsim predict` prints" in out
    assert "ttft p50 1/1" in out  # its TTFT p50 error, +18 %, is inside the light mixed-pace band


def test_cli_counts_no_level_of_a_kind_the_band_does_not_describe(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tp2 = DATA.parent / "h200-tp2" / "llama-3.1-8b-mix" / "f0.25"  # two GPUs: the band is TP=1's
    code, out, _ = cli(["validate", str(tp2), "--device", "h200"], monkeypatch, capsys)
    assert code == 0 and "median |error|" in out
    assert "inside the live error band" not in out
