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
    matched_summary,
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
    assert table["host_probe_mean_ms"].eq(host_probe_ms(meta, "mean")).all()
    mean = 1e3 * sum(r[1] for r in meta["host_probe"]["rows"]) / len(meta["host_probe"]["rows"])
    assert host_probe_ms(meta, "mean") == pytest.approx(mean)


def test_probe_mean_reads_the_samples_of_a_host_of_two_speeds() -> None:
    # three fast samples and two slow ones: the median is the fast mode, the mean between the modes
    rows = [[0.1 * i, probe, None] for i, probe in enumerate((0.001, 0.001, 0.001, 0.002, 0.002))]
    meta = {"host_probe": {"summary": {"probe_p50_s": 0.001}, "columns": ["t_s", "probe_s", "other_s"],
                           "rows": rows}}
    assert host_probe_ms(meta) == pytest.approx(1.0)
    assert host_probe_ms(meta, "mean") == pytest.approx(1.4)
    kept = {"host_probe": {"summary": {"probe_p50_s": 0.001, "probe_mean_s": 0.0013}}}
    assert host_probe_ms(kept, "mean") == pytest.approx(1.3)  # the summary's, when recorded
    assert host_probe_ms({"host_probe": {"summary": {"probe_p50_s": 0.001}}}, "mean") is None
    assert run_host_speed(meta, "probe-mean") == pytest.approx(reference_probe_s() / 0.0014)
    assert run_host_speed(meta, "probe") == pytest.approx(reference_probe_s() / 0.001)
    assert host_speed_option("probe-mean") == "probe-mean"
    with pytest.raises(ValueError, match="'mode'"):
        host_probe_ms(meta, "mode")


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
        assert code == 2 and f"--host-speed {bad!r}" in err and "'probe', 'probe-mean' or a number in [0.1, 10]" in err


def test_host_speed_option_reads_probe_or_a_number_in_range() -> None:
    assert host_speed_option("probe") == "probe" and host_speed_option("0.75") == 0.75
    for bad in ("fast", "0", "11", "nan"):
        with pytest.raises(ValueError, match="expected 'probe', 'probe-mean' or a number"):
            host_speed_option(bad)


def test_cli_counts_the_levels_inside_the_live_error_band(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["validate", str(SMALL_RUN), "--device", "h200"], monkeypatch, capsys)
    assert code == 0 and "inside the h200 live error band `latsim predict` prints" in out
    assert "ttft p50 1/1" in out  # its TTFT p50 error, +18 %, is inside the light mixed-pace band


def test_cli_counts_no_level_of_a_kind_the_band_does_not_describe(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tp2 = DATA.parent / "h200-tp2" / "llama-3.1-8b-mix" / "f0.25"  # two GPUs: the band is TP=1's
    code, out, _ = cli(["validate", str(tp2), "--device", "h200"], monkeypatch, capsys)
    assert code == 0 and "median |error|" in out
    assert "live error band" not in out


def _frame(statuses: list[str], ttft_s: list[float]) -> pd.DataFrame:
    n = len(statuses)
    return pd.DataFrame({"request_id": list(range(n)), "replica": [0] * n, "arrival_s": [0.0] * n,
                         "first_scheduled_s": [0.0] * n, "first_token_s": ttft_s,
                         "finish_s": [t + 1.0 for t in ttft_s], "input_tokens": [100] * n,
                         "output_tokens": [11] * n, "cached_tokens": [0] * n, "preemptions": [0] * n,
                         "status": statuses})


def test_a_cut_off_burst_is_compared_on_the_requests_the_live_run_finished() -> None:
    """The live run finished requests 0 and 2 (its deadline cut 1 and 3 off): the replay's TTFT
    is taken over 0 and 2 only, whatever it did with the others; ITL stays over all of them."""
    import numpy as np

    from latsim.metrics.summary import summarize

    measured = _frame(["ok", "unfinished", "ok", "unfinished"], [1.0, np.nan, 2.0, np.nan])
    replayed = _frame(["ok"] * 4, [1.5, 9.0, 2.5, 30.0])
    itl = (np.array([0.01, 0.02]), np.array([5.0, 5.0]))
    whole = summarize(replayed, *itl, rng=np.random.default_rng(0))
    out = matched_summary(whole, replayed, measured, *itl, seed=0)
    assert out["ttft_ms"]["mean"] == pytest.approx(2000.0) and out["ttft_ms"]["p99"] == pytest.approx(2500.0)
    assert whole["ttft_ms"]["p99"] == pytest.approx(30000.0)
    assert out["matched_requests"] == 2 and out["itl_ms"] == whole["itl_ms"]
    every = _frame(["ok"] * 4, [1.0, 1.1, 2.0, 2.1])
    assert matched_summary(whole, replayed, every, *itl, seed=0) is whole  # nothing cut off: unchanged


def test_the_h100_gemma_burst_past_capacity_is_replayed_on_its_finished_requests() -> None:
    run = DATA.parent / "h100-s37" / "gemma-3-27b-long" / "burst"  # 61 of 100 finished by the deadline
    level = compare_run(run, "h100")
    assert int((level.measured_records["status"] == "ok").sum()) == 61
    assert level.predicted["matched_requests"] == 61
    assert level.predicted["ttft_ms"]["count"] == level.measured["ttft_ms"]["count"] == 61



H100_LEVEL = DATA.parent / "h100-s37" / "gemma-3-27b-mix" / "f0.25"  # 35 requests, measured on an H100


def test_each_run_is_replayed_on_the_gpu_it_recorded(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import shutil

    from latsim.validate.compare import find_runs, recorded_device

    assert recorded_device(json.loads((H100_LEVEL / "meta.json").read_text())) == "h100"
    assert recorded_device(json.loads((SMALL_RUN / "meta.json").read_text())) == "h200"
    assert recorded_device({}) is None
    mixed = tmp_path / "runs"
    shutil.copytree(H100_LEVEL, mixed / "a")
    shutil.copytree(SMALL_RUN, mixed / "b")
    assert find_runs(mixed, "h100") == [mixed / "a"] and len(find_runs(mixed)) == 2
    code, out, _ = cli(["validate", str(mixed), "--json"], monkeypatch, capsys)  # --device auto
    assert code == 0 and {r["run"] for r in json.loads(out)} == {str(mixed / "a"), str(mixed / "b")}
    code, out, _ = cli(["validate", str(mixed), "--device", "h200"], monkeypatch, capsys)
    assert code == 0 and "left out 1 level(s) measured on another GPU (h100)" in out
    code, _, err = cli(["validate", str(H100_LEVEL), "--device", "h200"], monkeypatch, capsys)
    assert code == 2 and "was measured on h200" in err and len(err.strip().splitlines()) == 1
    meta = json.loads((mixed / "a" / "meta.json").read_text())
    meta["engine_config"]["versions"]["gpu"] = "Mystery Accelerator 9000"
    (mixed / "a" / "meta.json").write_text(json.dumps(meta))
    code, _, err = cli(["validate", str(mixed)], monkeypatch, capsys)
    assert code == 2 and "records no GPU latsim knows" in err and "--device NAME" in err
