"""scripts/host_steps.py recovers a known host line from synthetic sweep runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latsim.validate.records import RequestRecord, write_run
from tests.script_module import load_script


def host_steps() -> Any:
    return load_script(Path("host_steps.py"))


def level(root: Path, concurrency: int, step_s: float, rng: np.random.Generator) -> None:
    """``2 x concurrency`` requests of 40 tokens whose gaps are ``step_s`` but for a few outliers."""
    records = []
    for i in range(2 * concurrency):
        gaps = np.full(39, step_s)
        gaps[rng.integers(0, 39, 3)] *= 5.0  # a prefill step or two: the median ignores them
        times = 0.05 + np.r_[0.0, np.cumsum(gaps)]
        records.append(RequestRecord(f"c{concurrency}-{i}", 0.0, 0.0, 32, 40, 40, float(times[0]),
                                     tuple(float(t) for t in times), None, float(times[-1]), "ok"))
    meta = {"driver": "synthetic", "load": {"mode": "concurrency", "concurrency": concurrency}}
    write_run(root / f"c{concurrency:04d}", records, meta)


def test_host_steps_fits_the_line_through_the_levels(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    hs = host_steps()
    rng = np.random.default_rng(3)
    for c in (1, 2, 8, 32, 128):
        level(tmp_path, c, 2e-3 + 1e-5 * c, rng)
    conc, step = hs.sweep(tmp_path)
    assert conc.tolist() == [1, 2, 8, 32, 128]
    assert step == pytest.approx(2e-3 + 1e-5 * conc, rel=1e-9)
    monkeypatch.setattr("sys.argv", ["host_steps.py", str(tmp_path)])
    hs.main()
    assert "step_s 2.000 ms, seq_s 10.00 us/seq" in capsys.readouterr().out


def test_host_steps_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hs = host_steps()
    with pytest.raises(SystemExit, match="no concurrency levels"):
        hs.sweep(tmp_path)
    level(tmp_path, 4, 3e-3, np.random.default_rng(0))
    monkeypatch.setattr("sys.argv", ["host_steps.py", str(tmp_path)])
    with pytest.raises(SystemExit, match="need two levels"):
        hs.main()
