"""``latsim validate --out``: a summary figure of readable size and one HTML page per run."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.image

from latsim.report.validation_report import group_runs, model_name, write_report
from latsim.validate.compare import compare_run, error_table

DATA = Path(__file__).resolve().parents[2] / "data" / "validation" / "h200"
LEVELS = (DATA / "llama-2-7b-mix" / "f0.25", DATA / "llama-3.2-1b-mix" / "f0.25", DATA / "llama-3.2-1b-mix" / "f0.50")


def test_summary_figure_and_one_page_per_run(tmp_path: Path) -> None:
    levels = [compare_run(run, "h200") for run in LEVELS]
    runs = group_runs(levels)
    assert [Path(r).name for r in runs] == ["llama-2-7b-mix", "llama-3.2-1b-mix"]
    assert model_name(runs[str(DATA / "llama-3.2-1b-mix")]) == "llama-3.2-1b"
    write_report(levels, error_table(levels), tmp_path, "test")
    height, width = matplotlib.image.imread(tmp_path / "validation.png").shape[:2]
    assert height <= 1500 and width <= 1500  # one summary, not a panel per level
    page = (tmp_path / "validation.html").read_text()
    titles = re.findall(r"<h2>([^<]*\([^<]*\))</h2>", page)
    assert titles == ["h200/llama-2-7b-mix (llama-2-7b)", "h200/llama-3.2-1b-mix (llama-3.2-1b)"]  # folder/run
    assert page.count("data:image/png;base64,") == 3  # the summary and one figure per run
    assert not re.search(r"""src=["'](https?:|file:|/)""", page)


def test_the_summary_grows_with_the_runs_so_each_label_keeps_its_row(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from latsim.report.validation_report import BAR_ROW_IN, summary_figure

    def level(i: int) -> SimpleNamespace:
        stats = {m: {"p50": 10.0 + i, "p99": 20.0 + i} for m in ("ttft_ms", "tpot_ms", "e2e_ms")}
        guess = {m: {"p50": 11.0 + i, "p99": 19.0 + i} for m in stats}
        return SimpleNamespace(run_dir=str(tmp_path / "root" / f"run{i:02d}" / "f0.50"), level="f0.50",
                               measured=stats, predicted=guess)

    heights = {}
    for count in (2, 80):
        summary_figure([level(i) for i in range(count)], tmp_path / f"s{count}.png")
        heights[count] = matplotlib.image.imread(tmp_path / f"s{count}.png").shape[0]
    dpi = 90
    assert heights[80] >= BAR_ROW_IN * 80 * dpi > heights[2] * 0.9
