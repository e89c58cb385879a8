"""The benchmark pipeline on the CPU backend: runs, writes, resumes, records OOM (needs torch)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from latsim.calibration import runner
from latsim.calibration.grid import TINY, points
from latsim.calibration.runner import RunRequest, check_device, run_calibration

torch = pytest.importorskip("torch")


class Stop(Exception):
    pass


def _req(out: Path, **kw: object) -> RunRequest:
    return RunRequest(out=out, device="cpu", grid="tiny", backend="cpu", **kw)  # type: ignore[arg-type]


def _ids(out: Path) -> list[str]:
    return [i for p in out.glob("*.parquet") for i in pd.read_parquet(p)["point_id"]]


def test_runs_and_writes_everything(tmp_path: Path) -> None:
    prof = run_calibration(_req(tmp_path))
    assert prof["complete"] and prof["gpu_name"] == "cpu" and prof["grid"] == "tiny"
    assert sorted(_ids(tmp_path)) == sorted(p.id for p in points(TINY))
    assert json.loads((tmp_path / "profile.json").read_text())["grid_hash"] == prof["grid_hash"]
    gemm = pd.read_parquet(tmp_path / "gemm.parquet")
    assert (gemm["status"] == "ok").all() and (gemm["median_s"] > 0).all()
    comm = pd.read_parquet(tmp_path / "comm.parquet")
    assert (comm["status"] == "skipped").all() and comm["reason"].str.contains("CUDA").all()


def test_resumes_after_interruption(tmp_path: Path) -> None:
    seen: list[str] = []

    def crash_after_12(point, row) -> None:
        seen.append(point.id)
        if len(seen) == 12:
            raise Stop

    with pytest.raises(Stop):
        run_calibration(_req(tmp_path), on_point=crash_after_12)
    done = json.loads((tmp_path / "progress.json").read_text())["completed"]
    assert len(done) == 12 and set(done) == set(_ids(tmp_path))
    again: list[str] = []
    prof = run_calibration(_req(tmp_path), on_point=lambda p, r: again.append(p.id))
    assert prof["complete"] and not set(again) & set(done)
    ids = _ids(tmp_path)
    assert len(ids) == len(set(ids)) == len(points(TINY))


def test_oom_is_recorded_and_run_continues(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def oom(ctx, params):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setitem(runner.BENCHES, "moe", oom)
    prof = run_calibration(_req(tmp_path))
    moe = pd.read_parquet(tmp_path / "moe.parquet")
    assert (moe["status"] == "oom").all() and prof["counts"]["moe"] == {"oom": len(moe)}
    assert (pd.read_parquet(tmp_path / "gemm.parquet")["status"] == "ok").all()


def test_time_cap_stops_cleanly(tmp_path: Path) -> None:
    prof = run_calibration(_req(tmp_path, max_seconds=0.0))
    assert not prof["complete"]


def test_other_grid_in_same_folder_is_refused(tmp_path: Path) -> None:
    run_calibration(_req(tmp_path, families=("gemm",)))
    with pytest.raises(ValueError, match="written for grid"):
        run_calibration(_req(tmp_path))


def test_device_check() -> None:
    h200 = {"gpu_name": "NVIDIA H200"}
    check_device(h200, RunRequest(out=Path("."), device="h200"))
    with pytest.raises(ValueError, match="--device h100 was asked for but this machine's GPU is 'NVIDIA H200'"):
        check_device(h200, RunRequest(out=Path("."), device="h100"))
