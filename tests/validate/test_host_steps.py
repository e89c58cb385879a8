"""scripts/host_steps.py recovers a known host line from synthetic sweep runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latsim.measure.records import RequestRecord, write_run
from tests.script_module import load_script


def host_steps() -> Any:
    return load_script(Path("host_steps.py"))


def level(root: Path, concurrency: int, step_s: float, rng: np.random.Generator,
          probe_s: float | None = None) -> None:
    """``2 x concurrency`` requests of 40 tokens whose gaps are ``step_s`` but for a few outliers."""
    records = []
    for i in range(2 * concurrency):
        gaps = np.full(39, step_s)
        gaps[rng.integers(0, 39, 3)] *= 5.0  # a prefill step or two: the median ignores them
        times = 0.05 + np.r_[0.0, np.cumsum(gaps)]
        records.append(RequestRecord(f"c{concurrency}-{i}", 0.0, 0.0, 32, 40, 40, float(times[0]),
                                     tuple(float(t) for t in times), None, float(times[-1]), "ok"))
    meta: dict[str, Any] = {"driver": "synthetic", "load": {"mode": "concurrency", "concurrency": concurrency}}
    if probe_s is not None:
        meta["host_probe"] = {"summary": {"probe_p50_s": probe_s}}
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


def test_host_steps_reference_probe_of_another_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A host twice as slow (probe 2.4 ms) at c >= 128 puts the other sweep's host at 1.2 ms."""
    hs = host_steps()
    rng = np.random.default_rng(5)
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    for c in (16, 128, 256):
        level(fast, c, 2e-3 + 1e-5 * c, rng)
        level(slow, c, 2 * (2e-3 + 1e-5 * c), rng, probe_s=2.4e-3 if c >= 128 else 9.9e-3)
    level(slow, 512, 1e-2, rng, probe_s=1e-3)  # not in the other sweep: left out
    rows = hs.reference_probe(slow, fast, 128)
    assert [r[0] for r in rows] == [128, 256]
    assert [r[3] for r in rows] == pytest.approx([1.2e-3, 1.2e-3])
    monkeypatch.setattr("sys.argv", ["host_steps.py", str(slow), "--against", str(fast)])
    hs.main()
    assert "median probe/ratio over 2 levels: 1.20 ms" in capsys.readouterr().out
    assert hs.reference_probe(fast, slow, 128) == []  # no probe in the first sweep
