"""scripts/device_prefill_batch_probe.py's command line (the timing itself needs a GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.script_module import load_script

probe = load_script(Path("device_prefill_batch_probe.py"))


def test_an_unknown_shape_is_named_before_any_gpu_is_touched(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["device_prefill_batch_probe.py", "--shapes", "gemma-2-9b,llama-9000"])
    monkeypatch.setattr(probe, "make_context", lambda device: pytest.fail("the GPU was reached"))
    with pytest.raises(SystemExit) as exc:
        probe.main()
    assert exc.value.code == 2 and "--shapes 'gemma-2-9b,llama-9000': choose from" in capsys.readouterr().err


def test_rows_are_written_after_each_shape_and_stay_within_the_budget(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With the timing replaced (10 us a chunk), every (q, n) pair within ``MAX_TOKENS`` is one row,
    and the file holds the rows of every finished shape."""
    monkeypatch.setattr(probe, "time_paged", lambda ctx, heads, q_lens, k_lens: {"us": 10.0 * len(q_lens)})
    ctx = SimpleNamespace(torch=SimpleNamespace(cuda=SimpleNamespace(get_device_name=lambda i: "fake GPU")))
    out = tmp_path / "prefill_batch_probe.json"
    rows = probe.probe(ctx, ["gemma-2-9b", "llama-8b"], [0], out)
    expected = sum(1 for q in probe.CHUNKS for n in probe.COUNTS if q * n <= probe.MAX_TOKENS)
    assert len(rows) == 2 * expected
    assert all(r["q"] * r["n"] <= probe.MAX_TOKENS for r in rows)
    assert all(r["batched_us"] == pytest.approx(10.0 * r["n"]) for r in rows)
    saved = json.loads(out.read_text())
    assert saved["gpu"] == "fake GPU" and len(saved["rows"]) == len(rows)
