"""scripts/launch_speed_share.py: how much of a graph-less launch follows the host probe."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.script_module import load_script

ls = load_script(Path("launch_speed_share.py"))

REFERENCE_S = 0.002


def _run(folder: Path, share: float, launch_at_1: dict[str, float], n: int = 30, seed: int = 0) -> Path:
    """A timings.json whose prompts' launches follow ``c x (1 - share + share / speed)`` exactly,
    the CPU switching between speed 0.9 and 1.6 every 2 s (probe samples every 0.1 s)."""
    folder.mkdir()
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, 40.0, 0.1)
    speed = np.where((t // 2.0) % 2 == 0, 0.9, 1.6)
    scenarios = []
    for label, c in launch_at_1.items():
        prompts = []
        for _ in range(n):
            sent = float(rng.uniform(0.3, 39.0))
            s = float(speed[np.searchsorted(t, sent)])
            launch = c * (1.0 - share + share / s)
            prompts.append({"ttft_ms": 5.0 + launch + 3.0, "sent_s": sent,
                            "emissions_ms": [-5.0, 0.0, 5.0, 5.0 + launch, 5.0 + launch + 3.0]})
        scenarios.append({"scenario": {"kind": "graphless", "label": label}, "prompts": prompts})
    meta = {"host_series_t0_s": 0.0, "scenarios": scenarios,
            "host_series": {"columns": ["t_s", "probe_s"], "reference_s": REFERENCE_S,
                            "rows": [[float(a), REFERENCE_S / float(b)] for a, b in zip(t, speed, strict=True)]}}
    (folder / "timings.json").write_text(json.dumps(meta))
    return folder


def test_the_fit_recovers_the_share_and_each_scenarios_launch(tmp_path: Path) -> None:
    folder = _run(tmp_path / "run", share=0.4, launch_at_1={"a": 20.0, "b": 30.0})
    d = ls.prompt_rows(folder, agree=0.1)
    kept = d[d.kept]
    assert len(kept) >= 40 and set(kept.speed.round(2)) == {0.9, 1.6}
    share, per = ls.fit_share(kept)
    assert share == pytest.approx(0.4, abs=1e-6)
    assert per == pytest.approx({"a": 20.0, "b": 30.0}, rel=1e-6)


def test_prompts_across_a_switch_are_left_out(tmp_path: Path) -> None:
    d = ls.prompt_rows(_run(tmp_path / "run", share=1.0, launch_at_1={"a": 20.0}, n=100), agree=0.1)
    assert (~d.kept).any() and d.kept.any()
    assert ls.fit_share(d[d.kept])[0] == pytest.approx(1.0, abs=1e-4)


def test_bad_input_names_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ls.main([str(tmp_path)]) == 2
    assert "no timings.json" in capsys.readouterr().err
    old = tmp_path / "old"
    old.mkdir()
    (old / "timings.json").write_text(json.dumps({"scenarios": []}))
    assert ls.main([str(old)]) == 2
    assert "no host probe series" in capsys.readouterr().err
    assert ls.main([str(old), "--agree", "0"]) == 2
    assert "--agree 0.0: a fraction in (0, 1] is accepted" in capsys.readouterr().err
