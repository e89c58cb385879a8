"""``latsim report --heatmap``: a metric over two swept settings, with clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from latsim.plan.grid import expand
from latsim.plan.sweep import sweep


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "r.parquet"
    points = expand({"model": "llama-3.2-1b", "device": ["h100", "l40s"], "input_len": [128, 1024], "qps": [1, 4],
                     "output_len": 16, "num_requests": 40})
    sweep(points, out)
    return out


def test_heatmap_png_is_written(cli, results, tmp_path) -> None:
    png = tmp_path / "hm.png"
    code, _, err = cli("report", str(results), "--heatmap", "input_len,qps", "--metric", "ttft_p99_ms",
                       "--where", "device=h100", "--out", str(png))
    assert code == 0 and "wrote" in err
    import matplotlib.image

    image = matplotlib.image.imread(png)
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert np.std(image[..., :3]) > 0.05  # not a blank canvas


@pytest.mark.parametrize(("args", "words"), [
    (["--heatmap", "input_len,qps"], "device also vary"),
    (["--heatmap", "input_len,speed", "--where", "device=h100"], "'speed' is not a swept setting"),
    (["--heatmap", "input_len", "--where", "device=h100"], "expected two settings"),
    (["--heatmap", "input_len,qps", "--where", "device=h100", "--metric", "ttft_p98_ms"],
     "'ttft_p98_ms' is not a result column"),
    (["--heatmap", "input_len,qps", "--where", "device=b200"], "no row"),
    (["--heatmap", "input_len,qps", "--where", "colour=red"], "expected SETTING=VALUE"),
])
def test_bad_heatmap_request_is_one_line_exit_2(cli, results, tmp_path, args, words) -> None:
    code, _, err = cli("report", str(results), *args, "--out", str(tmp_path / "x.png"))
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1


def test_missing_or_foreign_results_file(cli, tmp_path) -> None:
    code, _, err = cli("report", str(tmp_path / "none.parquet"), "--heatmap", "a,b")
    assert code == 2 and "does not exist" in err
    bogus = tmp_path / "bogus.parquet"
    bogus.write_text("not parquet")
    code, _, err = cli("report", str(bogus), "--heatmap", "a,b")
    assert code == 2 and "not a parquet file" in err
