"""scripts/merge_calibration.py: replace and append a family table, with a source record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from latsim.costmodel.profile.tables import read_shard, shard_path, write_shard
from tests.script_module import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "merge_calibration.py"


def _folder(path: Path, ids: list[str], impl: str, date: str) -> Path:
    path.mkdir()
    rows = [{"point_id": i, "family": "attention", "status": "ok", "impl": impl, "median_s": 1e-5} for i in ids]
    write_shard(path, "attention", rows)
    doc = {"date_utc": date, "grid": "g", "grid_hash": "h", "gpu_name": "gpu", "vllm": "0.25.1",
           "impl": {"attention": [impl]}, "counts": {"attention": {"ok": len(ids)}}}
    (path / "profile.json").write_text(json.dumps(doc))
    return path


def test_append_keeps_existing_points_and_records_the_source(tmp_path: Path) -> None:
    merge = load_script(SCRIPT).merge
    profile = _folder(tmp_path / "profile", ["a", "b"], "old", "2026-01-01")
    run = _folder(tmp_path / "run", ["b", "c"], "new", "2026-02-02")
    source = merge(profile, run, "attention", "append")
    merged = read_shard(shard_path(profile, "attention"))
    assert merged["point_id"].tolist() == ["a", "b", "c"]
    assert merged.set_index("point_id").loc["b", "impl"] == "old"  # a point both measured keeps ours
    assert source["rows_taken"] == 1 and source["run_date_utc"] == "2026-02-02"
    doc = json.loads((profile / "profile.json").read_text())
    assert doc["attention_sources"] == [source]
    assert doc["impl"]["attention"] == ["new", "old"] and doc["counts"]["attention"] == {"ok": 3}


def test_into_merges_into_a_table_of_its_own_and_leaves_the_family_alone(tmp_path: Path) -> None:
    merge = load_script(SCRIPT).merge
    profile = _folder(tmp_path / "profile", ["a", "b"], "old", "2026-01-01")
    run = _folder(tmp_path / "run", ["b", "c"], "tiles", "2026-02-02")
    source = merge(profile, run, "attention", "append", into="decode_tiles")
    assert read_shard(shard_path(profile, "attention"))["point_id"].tolist() == ["a", "b"]
    assert read_shard(shard_path(profile, "decode_tiles"))["point_id"].tolist() == ["b", "c"]
    doc = json.loads((profile / "profile.json").read_text())
    assert doc["decode_tiles_sources"] == [source] and "attention_sources" not in doc
    assert doc["impl"]["attention"] == ["old"] and doc["impl"]["decode_tiles"] == ["tiles"]
    merge(profile, run, "attention", "append", into="decode_tiles")  # again: nothing new
    assert len(read_shard(shard_path(profile, "decode_tiles"))) == 2


def test_replace_swaps_the_table(tmp_path: Path) -> None:
    merge = load_script(SCRIPT).merge
    profile = _folder(tmp_path / "profile", ["a", "b"], "old", "2026-01-01")
    run = _folder(tmp_path / "run", ["c"], "new", "2026-02-02")
    merge(profile, run, "attention", "replace")
    assert pd.read_parquet(shard_path(profile, "attention"))["point_id"].tolist() == ["c"]
    assert json.loads((profile / "profile.json").read_text())["impl"]["attention"] == ["new"]


def test_replace_only_the_rows_of_one_value(tmp_path: Path) -> None:
    merge = load_script(SCRIPT).merge
    profile = _folder(tmp_path / "profile", ["a", "b"], "old", "2026-01-01")
    run = _folder(tmp_path / "run", ["a", "c"], "new", "2026-02-02")
    for folder, dtypes in ((profile, ["bf16", "fp8"]), (run, ["bf16", "fp8"])):
        table = read_shard(shard_path(folder, "attention")).assign(dtype=dtypes)
        write_shard(folder, "attention", table.to_dict("records"))
    source = merge(profile, run, "attention", "replace", ("dtype", "fp8"))
    merged = read_shard(shard_path(profile, "attention")).set_index("point_id")
    assert merged.index.tolist() == ["a", "c"] and merged.loc["a", "impl"] == "old"  # bf16 stays ours
    assert merged.loc["c", "impl"] == "new" and source["only"] == "dtype=fp8" and source["rows_taken"] == 1


def test_update_takes_the_runs_row_of_a_point_both_measured(tmp_path: Path) -> None:
    merge = load_script(SCRIPT).merge
    profile = _folder(tmp_path / "profile", ["a", "b"], "old", "2026-01-01")
    run = _folder(tmp_path / "run", ["b", "c"], "new", "2026-02-02")
    source = merge(profile, run, "attention", "update")
    merged = read_shard(shard_path(profile, "attention")).set_index("point_id")
    assert sorted(merged.index) == ["a", "b", "c"] and merged.loc["b", "impl"] == "new"
    assert merged.loc["a", "impl"] == "old" and source["rows_taken"] == 2 and source["mode"] == "update"
    assert source["timer"] == ["cuda-events"]  # a run before the timer column timed calls between events


def test_the_source_names_the_timers_of_the_rows_taken(tmp_path: Path) -> None:
    merge = load_script(SCRIPT).merge
    profile = _folder(tmp_path / "profile", ["a", "b"], "old", "2026-01-01")
    run = _folder(tmp_path / "run", ["b"], "new", "2026-02-02")
    rows = read_shard(shard_path(run, "attention")).assign(timer="cuda-graph")
    write_shard(run, "attention", rows.to_dict("records"))
    source = merge(profile, run, "attention", "update")
    merged = read_shard(shard_path(profile, "attention")).set_index("point_id")
    assert source["timer"] == ["cuda-graph"] and merged.loc["b", "timer"] == "cuda-graph"
    assert pd.isna(merged.loc["a", "timer"])  # the profile's older row keeps no timer: events


def test_update_at_most_a_row_count_and_only_known_points(tmp_path: Path) -> None:
    """The graph-timed re-run: rows up to 512 tokens, of points the profile holds, replace the profile's."""
    merge = load_script(SCRIPT).merge
    profile = _folder(tmp_path / "profile", ["a", "b", "c"], "old", "2026-01-01")
    run = _folder(tmp_path / "run", ["a", "b", "c", "d"], "new", "2026-02-02")
    rows = read_shard(shard_path(run, "attention")).assign(M=[64, 512, 1024, 8])
    write_shard(run, "attention", rows.to_dict("records"))
    source = merge(profile, run, "attention", "update", at_most=("M", 512.0), known_points=True)
    merged = read_shard(shard_path(profile, "attention")).set_index("point_id")
    assert sorted(merged.index) == ["a", "b", "c"]  # d is no point of the profile
    assert merged["impl"].to_dict() == {"a": "new", "b": "new", "c": "old"}  # c has 1,024 rows
    assert source["rows_taken"] == 2 and source["at_most"] == "M<=512" and source["known_points"] is True


@pytest.mark.parametrize(("flag", "text", "why"), [("--at-most", "M=lots", "'lots' is not a number"),
                                                   ("--at-least", "M", "expected COLUMN=VALUE")])
def test_the_command_line_rejects_a_bound_it_cannot_read(tmp_path: Path, flag: str, text: str, why: str) -> None:
    profile = _folder(tmp_path / "profile", ["a"], "old", "2026-01-01")
    run = _folder(tmp_path / "run", ["a"], "new", "2026-02-02")
    done = subprocess.run([sys.executable, str(SCRIPT), "--profile", str(profile), "--run", str(run), "--family",
                           "attention", "--mode", "update", flag, text], capture_output=True, text=True)
    assert done.returncode == 2 and why in done.stderr


def test_a_band_of_rows_between_two_bounds(tmp_path: Path) -> None:
    """``at_least`` with ``at_most``: only the run's rows an imported grid skipped (here 514-767)."""
    merge = load_script(SCRIPT).merge
    profile = _folder(tmp_path / "profile", ["a"], "old", "2026-01-01")
    run = _folder(tmp_path / "run", ["b", "c", "d", "e"], "new", "2026-02-02")
    rows = read_shard(shard_path(run, "attention")).assign(M=[512, 514, 767, 768])
    write_shard(run, "attention", rows.to_dict("records"))
    source = merge(profile, run, "attention", "append", at_most=("M", 767.0), at_least=("M", 514.0))
    merged = read_shard(shard_path(profile, "attention"))
    assert sorted(merged["point_id"]) == ["a", "c", "d"]
    assert source["at_least"] == "M>=514" and source["at_most"] == "M<=767" and source["rows_taken"] == 2
