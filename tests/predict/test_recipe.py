"""The training recipe still runs: a small Sobol design, simulated, resumed, read back."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from latsim.predict.design import DOMAIN, sample
from latsim.predict.features import GRID_COLUMNS
from latsim.predict.recipe import TARGETS, fitting, is_stable, read_points, read_results, run

MODELS = ("llama-3.2-1b", "qwen2.5-7b")
DEVICES = ("h100", "l40s")


@pytest.fixture(scope="module")
def points() -> pd.DataFrame:
    frame, dropped = sample(8, seed=3, models=MODELS, devices=DEVICES)
    assert len(frame) + dropped == 8  # a point no TP can host (qwen2.5-7b's 28 heads, TP 8) is dropped
    return frame.head(3)


def test_design_covers_the_domain_with_every_grid_column(points):
    assert set(GRID_COLUMNS) <= set(points.columns)
    assert set(points["model"]) <= set(MODELS) and set(points["device"]) <= set(DEVICES)
    lo, hi = DOMAIN["load"]
    assert points["load"].between(lo, hi).all() and (points["qps"] > 0).all()
    again, _ = sample(8, seed=3, models=MODELS, devices=DEVICES)
    pd.testing.assert_frame_equal(points, again.head(3))  # deterministic for a seed
    assert points["id"].between(3 * 8, 4 * 8 - 1).all()  # seed x n + index: samples of two seeds never share an id


def test_a_sample_can_draw_its_load_over_the_saturated_capacity():
    from latsim.predict.features import features

    near, _ = sample(8, seed=4, models=MODELS, devices=DEVICES, load_basis="saturated", load_range=(0.6, 1.3))
    assert near["load_saturated"].between(0.6, 1.3).all()
    feats = features(near)  # the rate over the saturated capacity is the sampled load, the design's load kept
    np.testing.assert_allclose(feats["load_saturated"], near["load_saturated"], rtol=1e-9)
    np.testing.assert_allclose(feats["load"], near["load"], rtol=1e-9)
    assert near["id"].between(4 * 8, 5 * 8 - 1).all()
    with pytest.raises(ValueError, match="load_basis must be one of estimated, saturated"):
        sample(8, seed=4, load_basis="offered")


def test_training_refuses_two_folders_holding_the_same_points(points, tmp_path):
    from latsim.predict.train import design_text, read_all

    for out in ("a", "b"):
        run(points.head(1), tmp_path / out, num_requests=20, workers=1)
    with pytest.raises(ValueError, match="appears in more than one"):
        read_all([str(tmp_path / "a"), str(tmp_path / "b")])
    assert design_text(read_all([str(tmp_path / "a")])).startswith("scrambled Sobol sample of seed 3 ")


def test_recipe_simulates_resumes_and_reads_back(points, tmp_path):
    csv = tmp_path / "points.csv"
    csv.write_text("# a comment line\n" + points.to_csv(index=False))
    read = read_points(csv)
    assert run(read.head(2), tmp_path / "out", num_requests=40, workers=1) == 2
    assert run(read, tmp_path / "out", num_requests=40, workers=1) == 1  # only the missing point
    rows = read_results(tmp_path / "out")
    assert list(rows["id"]) == list(points["id"])
    for target in TARGETS:
        assert (rows[target] > 0).all(), target
    assert (rows["ttft_ms_p99"] >= rows["ttft_ms_p50"]).all()


def test_read_results_of_an_empty_folder_says_how_to_make_it(tmp_path):
    with pytest.raises(ValueError, match=r"latsim\.predict\.recipe"):
        read_results(tmp_path)


def _records(arrival: np.ndarray, finish: np.ndarray, status: str = "ok") -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": arrival, "finish_s": finish, "status": status})


def test_stability_rule():
    arrival = np.arange(200) * 0.1
    assert is_stable(_records(arrival, arrival + 2.0))  # served at the offered rate, with a delay
    assert not is_stable(_records(arrival, np.arange(200) * 0.2 + 1.0))  # served at half the rate
    unfinished = _records(arrival, arrival + 1.0)
    unfinished.loc[5, "status"] = "unfinished"
    assert not is_stable(unfinished)


def test_a_chunk_never_overwrites_a_part_whose_name_it_shares(points, tmp_path):
    from latsim.predict.recipe import _write_part

    out = tmp_path / "out"
    out.mkdir()
    first = int(points["id"].iloc[0])
    # a hand-edited folder: a part named after a point it no longer holds
    pd.DataFrame({"id": [first + 1], "sim_seconds": [0.1]}).to_parquet(out / f"part-{first:06d}.parquet")
    _write_part(out, [{"id": first, "sim_seconds": 0.2}])
    ids = sorted(int(i) for p in out.glob("part-*.parquet") for i in pd.read_parquet(p)["id"])
    assert ids == [first, first + 1]


def test_a_point_that_no_longer_fits_is_left_out_and_named(points, tmp_path, capsys):
    # a 72B model at TP 1 on one L4 (24 GB): its weights alone do not fit, as a memory plan
    # changed after the design could leave a committed point
    huge = {**points.iloc[0].to_dict(), "id": 99_999, "model": "qwen2.5-72b", "device": "l4", "tp": 1}
    frame = pd.concat([points.head(1), pd.DataFrame([huge])], ignore_index=True)
    kept, gone = fitting(frame)
    assert list(kept["id"]) == [points.iloc[0]["id"]] and len(gone) == 1 and "id 99999" in gone[0]
    assert run(frame, tmp_path / "out", num_requests=40, workers=1) == 1
    assert "1 points no longer fit their GPUs at their TP" in capsys.readouterr().err
    assert list(read_results(tmp_path / "out")["id"]) == [points.iloc[0]["id"]]
