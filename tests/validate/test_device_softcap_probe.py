"""scripts/device_softcap_probe.py's command line and rows (the timing itself needs a GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.script_module import load_script

probe = load_script(Path("device_softcap_probe.py"))


@pytest.mark.parametrize("heads", ["16,8", "16,x,256", "16,6,256", "0,8,256"])
def test_bad_heads_are_named_before_any_gpu_is_touched(heads: str, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["device_softcap_probe.py", "--heads", heads])
    monkeypatch.setattr(probe, "make_context", lambda device: pytest.fail("the GPU was reached"))
    with pytest.raises(SystemExit) as exc:
        probe.main()
    assert exc.value.code == 2 and f"--heads {heads!r}" in capsys.readouterr().err


def test_a_non_positive_softcap_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["device_softcap_probe.py", "--softcap", "0"])
    monkeypatch.setattr(probe, "make_context", lambda device: pytest.fail("the GPU was reached"))
    with pytest.raises(SystemExit) as exc:
        probe.main()
    assert exc.value.code == 2 and "--softcap 0.0" in capsys.readouterr().err


def test_each_variant_prepares_the_call_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the timing replaced by a record of the prepared batch, the four calls differ only in
    what their names say: soft-cap, the schedule left to the call, the window."""
    seen: list[dict] = []

    def fake_time(ctx, heads, q_lens, k_lens, prepare):
        c = prepare({"sched": "aot", "window": [-1, -1], "q_lens": q_lens})
        seen.append(c)
        return {"us": 10.0 * len(q_lens) * (2 if c.get("softcap") else 1)}

    monkeypatch.setattr(probe, "time_paged", fake_time)
    ctx = SimpleNamespace(torch=SimpleNamespace(cuda=SimpleNamespace(get_device_name=lambda i: "fake GPU")))
    out = tmp_path / "softcap_probe.json"
    rows = probe.probe(ctx, (16, 8, 256), 50.0, 4096, out)
    expected = sum(1 for q in probe.CHUNKS for n in probe.COUNTS if q * n <= probe.MAX_TOKENS) * len(probe.CONTEXTS)
    assert len(rows) == expected and len(seen) == 4 * expected
    grid, capped, engine, window = seen[:4]
    assert grid == {"sched": "aot", "window": [-1, -1], "q_lens": [128]}
    assert capped["softcap"] == 50.0 and capped["sched"] == "aot"
    assert engine["softcap"] == 50.0 and engine["sched"] is None and engine["window"] == [-1, -1]
    assert window["sched"] is None and window["window"] == [4095, 0]
    assert all(r["engine_us"] == pytest.approx(2 * r["grid_us"]) for r in rows)
    saved = json.loads(out.read_text())
    assert saved["gpu"] == "fake GPU" and saved["heads"] == [16, 8, 256] and len(saved["rows"]) == len(rows)
