"""``latsim sweep``: grid expansion, one row per point, resume, local processes and Dask."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from latsim.plan import sweep as sweep_module
from latsim.plan.grid import expand, load_grid, point_id
from latsim.plan.sweep import sweep

GRID = """\
model: [llama-3.2-1b, qwen2.5-7b]
device: [h100, l40s]
qps: [2, 6]
input_len: 128
output_len: 32
num_requests: 60
"""
ROW_KEYS = {"model", "device", "qps", "input_len", "output_len", "num_requests", "ttft_p50_ms", "ttft_p99_ms",
            "tpot_p50_ms", "tpot_p99_ms", "e2e_p99_ms", "throughput_rps", "stable"}


@pytest.fixture
def grid_file(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(GRID)
    return path


def test_grid_expands_as_a_product_in_file_order(grid_file) -> None:
    points = load_grid(grid_file)
    assert len(points) == 8
    assert points[0] == {"model": "llama-3.2-1b", "device": "h100", "qps": 2.0, "input_len": 128, "output_len": 32,
                         "num_requests": 60}
    assert [p["qps"] for p in points[:2]] == [2.0, 6.0]
    assert len({point_id(p) for p in points}) == 8
    assert point_id(dict(reversed(list(points[0].items())))) == point_id(points[0])


def test_sweep_writes_one_row_per_point_and_resumes(grid_file, tmp_path, monkeypatch, cli) -> None:
    out = tmp_path / "r.parquet"
    code, _, err = cli("sweep", str(grid_file), "--out", str(out))
    assert code == 0 and "8 point(s) run now" in err
    rows = pd.read_parquet(out)
    assert len(rows) == 8 and set(rows.columns) >= ROW_KEYS
    assert rows["error"].isna().all() and rows["stable"].all()
    faster = rows.query("model == 'llama-3.2-1b' and qps == 2").set_index("device")["tpot_p50_ms"]
    assert faster["h100"] < faster["l40s"]
    # an interrupted sweep: drop three rows, rerun, only those three run
    rows.iloc[:5].to_parquet(out, index=False)
    calls = []
    real = sweep_module.run_point
    monkeypatch.setattr(sweep_module, "run_point", lambda p, r=1: calls.append(p) or real(p, r))
    assert sweep(load_grid(grid_file), out) == 3
    assert len(calls) == 3
    again = pd.read_parquet(out)
    pd.testing.assert_frame_equal(again.drop(columns=["point_id"]), rows.drop(columns=["point_id"]))


def test_point_that_cannot_run_is_a_row_with_its_error(tmp_path) -> None:
    out = tmp_path / "r.parquet"
    points = expand({"model": "qwen2.5-32b", "device": ["l40s", "h200"], "tp": 1, "qps": 0.5, "input_len": 64,
                     "output_len": 8, "num_requests": 20})
    assert sweep(points, out) == 2
    rows = pd.read_parquet(out).set_index("device")
    assert "does not fit" in rows.loc["l40s", "error"]
    assert pd.isna(rows.loc["h200", "error"]) and rows.loc["h200", "ttft_p99_ms"] > 0


def test_local_processes_give_what_one_process_gives(grid_file, tmp_path) -> None:
    points = load_grid(grid_file)[:4]
    sweep(points, tmp_path / "one.parquet", workers=1)
    sweep(points, tmp_path / "two.parquet", workers=2)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "one.parquet"), pd.read_parquet(tmp_path / "two.parquet"))


def test_dask_local_cluster_runs_the_grid(grid_file, tmp_path) -> None:
    distributed = pytest.importorskip("distributed")
    points = load_grid(grid_file)[:4]
    sweep(points, tmp_path / "local.parquet")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as c:
        assert sweep(points, tmp_path / "dask.parquet", address=c.scheduler_address) == 4
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "local.parquet"),
                                  pd.read_parquet(tmp_path / "dask.parquet"))


def test_address_that_does_not_answer_fails_fast(grid_file, tmp_path, cli) -> None:
    start = time.monotonic()
    code, _, err = cli("sweep", str(grid_file), "--out", str(tmp_path / "r.parquet"), "--address",
                       "tcp://127.0.0.1:9")
    assert code == 2
    assert "no Dask scheduler answered" in err and len(err.strip().splitlines()) == 1
    assert time.monotonic() - start < 60  # generous: the client gives up after 5 s


@pytest.mark.parametrize(("text", "words"), [
    ("", "is empty"),
    ("[1, 2]", "must be a mapping"),
    ("model: [llama-3.2-1b\n", "not valid YAML"),
    ("modle: [llama-3.2-1b]\n", "unknown key 'modle'; did you mean model"),
    ("qps: []\n", "key 'qps' has an empty list"),
    ("qps: [fast]\n", "key 'qps': 'fast' is not valid"),
])
def test_bad_grid_names_file_and_key(tmp_path, cli, text, words) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _, err = cli("sweep", str(path), "--out", str(tmp_path / "r.parquet"))
    assert code == 2
    assert words in err and str(path) in err and len(err.strip().splitlines()) == 1


def test_results_of_another_grid_are_not_mixed_in(grid_file, tmp_path, cli) -> None:
    out = tmp_path / "r.parquet"
    sweep(expand({"model": "llama-3.2-1b", "qps": 1, "num_requests": 20, "output_len": 8}), out)
    code, _, err = cli("sweep", str(grid_file), "--out", str(out))
    assert code == 2 and "not in this grid" in err


@pytest.mark.parametrize(("args", "words"), [
    (["--workers", "0"], "--workers must be >= 1, got 0"),
    (["--replications", "0"], "--replications must be >= 1, got 0"),
    (["--address", "localhost:8786"], "expected a scheduler address such as tcp://host:8786"),
])
def test_bad_sweep_option_is_one_line_exit_2(grid_file, tmp_path, cli, args, words) -> None:
    code, _, err = cli("sweep", str(grid_file), "--out", str(tmp_path / "r.parquet"), *args)
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1
