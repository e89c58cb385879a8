"""scripts/repeatability.py groups runs by configuration and level across engine starts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.script_module import load_script


def errors_frame() -> pd.DataFrame:
    rows = []
    for start, qps, err in (("a", 50.0, -0.10), ("b", 40.0, -0.50), ("c", 45.0, 0.20)):
        for level, frac in (("f0.25", 0.25), ("burst", None)):
            for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
                for stat in ("p50", "p99"):
                    rows.append({"run": f"data/validation/{start}/m-1b-mix/{level}", "level": level,
                                 "offered_qps": qps * frac if frac else None, "client_bound": False,
                                 "metric": metric, "stat": stat, "measured": 1.0, "predicted": 1.0 + err,
                                 "error": err})
    # a configuration measured on one start only is left out; a TP=2 root is its own deployment
    rows.append({**rows[0], "run": "data/validation/a/m-8b-mix/f0.25"})
    rows.append({**rows[0], "run": "data/validation/x-tp2/m-1b-mix/f0.25"})
    return pd.DataFrame(rows)


def test_spread_across_starts() -> None:
    rep = load_script(Path("repeatability.py"))
    table = rep.spread_table(rep.per_start(errors_frame()))
    assert list(table["config"]) == ["m-1b-mix"] and table["starts"].iloc[0] == 3
    assert list(table["model"]) == ["m-1b"]
    assert table["capacity"].iloc[0] == "40-50"  # offered rate / fraction
    lo, hi, med = table["tpot p50"].iloc[0]
    assert (lo, hi) == pytest.approx((-0.50, 0.20)) and med == pytest.approx(0.20)
    assert rep.model_of("llama-3.2-1b-fixed-in512-out128") == "llama-3.2-1b"
    rows = rep.per_start(errors_frame())
    assert set(rows.loc[rows["start"] == "x-tp2", "model"]) == {"m-1b (TP=2)"}


def test_capacity_from_the_target_rate_in_summary_json(tmp_path: Path) -> None:
    """Where the run folder's summary.json gives the rate a level was asked for, that sets the
    capacity, not the rate its arrivals happened to realise."""
    import json

    rep = load_script(Path("repeatability.py"))
    errors = errors_frame()
    errors["run"] = str(tmp_path) + "/" + errors["run"]
    folder = tmp_path / "data/validation/b/m-1b-mix"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps([{"level": "burst", "qps": None},
                                                     {"level": "f0.25", "qps": 15.0}]))
    table = rep.spread_table(rep.per_start(errors))
    assert table["capacity"].iloc[0] == "45-60"  # b: 15 / 0.25 = 60 (its arrivals gave 40)
    assert rep.target_qps(str(tmp_path / "nowhere/f0.25"), 3.0) == 3.0
