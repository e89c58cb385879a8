"""scripts/decode_emissions.py: pure decode steps read from token times, priced beside the measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.script_module import load_script

de = load_script(Path("decode_emissions.py"))
DATA = Path(__file__).resolve().parents[2] / "data" / "validation"
LEVEL = DATA / "h200-s25/llama-3.1-70b-gptq-fixed-in512-out128/f0.50"


def _emission(start: float, tokens: int) -> np.ndarray:
    return start + np.arange(tokens) * 5e-6


def test_only_steps_with_no_first_token_on_either_side_are_pure_decode() -> None:
    # emissions every 10 ms of 20, 21, 22, ... tokens; a first token rides the fifth emission
    starts = [0.010 * k for k in range(8)]
    times = np.sort(np.concatenate([_emission(s, 20 + k) for k, s in enumerate(starts)]))
    first = np.array([starts[4] + 3e-6])
    gaps, seqs = de.pure_decode_steps(times, first)
    # emissions 1..6 have both neighbours; 3, 4 and 5 sit beside or carry the first token
    assert seqs.tolist() == [21, 22, 26] and gaps == pytest.approx([0.010] * 3)
    gaps, seqs = de.pure_decode_steps(times, np.array([]))
    assert seqs.tolist() == [21, 22, 23, 24, 25, 26]


def test_fixed_contexts_spread_over_the_output() -> None:
    assert de.fixed_contexts({"in": 512, "out": 128}, 3) == [513, 576, 640]
    assert de.fixed_contexts({"in": 512, "out": 128}, 1) == [513]


def test_a_level_is_priced_per_sequence_group() -> None:
    _, rows = de.level_rows(LEVEL, 1.0, "h200", 10)
    assert rows and sum(r["steps"] for r in rows) > 200
    assert [r["seqs"] for r in rows] == sorted(r["seqs"] for r in rows)
    for r in rows:
        lo, hi = (int(x) for x in r["group"].strip("()]").split(", "))
        assert lo < r["seqs"] <= hi and r["ratio"] == pytest.approx(r["model_ms"] / r["measured_ms"])
        assert 5.0 < r["measured_ms"] < 100.0  # a 70B's decode step, not a held gap or a split one


def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    mix = DATA / "h200-s24/llama-3.1-70b-fp8-mix/f0.50"
    assert de.main([str(mix)]) == 2
    assert "'mix' is not a fixed one" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        de.main([str(LEVEL), "--host-speed", "fast"])
    assert exc.value.code == 2 and "expected 'probe' or a number" in capsys.readouterr().err
