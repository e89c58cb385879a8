"""scripts/cpu_contention.py: the pair matrix and what it calls siblings."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.script_module import load_script


def script():  # type: ignore[no-untyped-def]
    return load_script(Path("cpu_contention.py"))


def test_sibling_pairs_need_both_sides_slow() -> None:
    cc = script()
    pairs = {(0, 8): (1.8, 1.7), (0, 1): (1.0, 1.02), (1, 9): (1.9, 1.1), (2, 10): (1.31, 1.3)}
    assert cc.sibling_pairs(pairs) == [(0, 8), (2, 10)]
    assert cc.sibling_pairs(pairs, threshold=1.5) == [(0, 8)]


def test_measure_on_this_machine(tmp_path: Path) -> None:
    cc = script()
    before = os.sched_getaffinity(0)
    cpus = sorted(before)[:2]
    out = tmp_path / "cc.json"
    cc.main(["--out", str(out), "--reps", "3", "--work", "2000", "--timeline-s", "0.05"])
    result = json.loads(out.read_text())
    assert set(result["solo_s"]) >= {str(c) for c in cpus}
    n = len(result["cpus"])
    assert len(result["pairs"]) == n * (n - 1) // 2
    assert all(0.2 < r < 20 for row in result["pairs"] for r in row[2:])
    assert result["timeline"] and all(dt > 0 for _, dt in result["timeline"])
    assert os.sched_getaffinity(0) == before  # the timeline's pinning is undone
