"""scripts/band_table.py: an error-band file printed as the README's table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latsim.validate import error_band as eb
from tests.script_module import load_script

bt = load_script(Path("band_table.py"))


@pytest.mark.parametrize("device", eb.band_devices())
def test_every_cell_of_a_shipped_band_is_a_row(device: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = eb.band_path(device)
    doc = json.loads(path.read_text())
    cells = sum(1 for key in ("bands", "known_host") for load in doc[key].values() for cell in load.values() if cell)
    assert bt.main([str(path)]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert len(lines) == 2 + cells
    assert all(line.count("|") == 10 for line in lines)


def test_percent_keeps_the_sign_of_a_small_negative() -> None:
    assert [bt.percent(x) for x in (-0.004, 0.0, 0.125, -0.3)] == ["-0", "+0", "+12", "-30"]


def test_a_file_that_is_not_a_band_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "band.json"
    bad.write_text(json.dumps({"device": "h200"}))
    assert bt.main([str(bad)]) == 2
    assert "not an error-band file" in capsys.readouterr().err
