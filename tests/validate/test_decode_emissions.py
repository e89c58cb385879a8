"""scripts/decode_emissions.py: pure decode steps read from token times, priced beside the measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
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
    contexts = np.arange(len(times), dtype=float)
    first = np.array([starts[4] + 3e-6])
    gaps, batches = de.pure_decode_batches(times, contexts, first)
    # emissions 1..6 have both neighbours; 3, 4 and 5 sit beside or carry the first token
    assert [len(b) for b in batches] == [21, 22, 26] and gaps == pytest.approx([0.010] * 3)
    assert batches[0].tolist() == list(range(20, 41))  # the tokens of emission 1, in time order
    gaps, batches = de.pure_decode_batches(times, contexts, np.array([]))
    assert [len(b) for b in batches] == [21, 22, 23, 24, 25, 26]


def test_each_token_carries_the_context_it_was_decoded_over() -> None:
    requests = pd.DataFrame({"input_tokens": [100, 7], "chunk_times_s": [(0.1, 0.3, 0.5), (0.2, 0.4)],
                             "chunk_tokens": [None, (1, 2)]})
    times, contexts = de.token_contexts(requests)
    assert times.tolist() == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert contexts.tolist() == [100, 7, 101, 8, 102]  # a chunk of two tokens starts at the first's context


def test_a_level_is_priced_per_group_of_batch_sizes() -> None:
    _, rows = de.level_rows(LEVEL, 1.0, "h200", 10)
    assert rows and sum(r["steps"] for r in rows) > 200
    assert [r["seqs"] for r in rows] == sorted(r["seqs"] for r in rows)
    for r in rows:
        lo, hi = (int(x) for x in r["group"].strip("()]").split(", "))
        assert lo < r["seqs"] <= hi and r["ratio"] == pytest.approx(r["model_ms"] / r["measured_ms"])
        assert 5.0 < r["measured_ms"] < 100.0  # a 70B's decode step, not a held gap or a split one
        assert 512 < r["context"] <= 640  # fixed 512 / 128: contexts between the prompt and its end


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert de.main([str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        de.main([str(LEVEL), "--host-speed", "fast"])
    assert exc.value.code == 2 and "expected 'probe', 'probe-mean' or a number" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        de.main([str(LEVEL), "--min-steps", "0"])
    assert exc.value.code == 2 and "--min-steps 0" in capsys.readouterr().err


def test_a_batch_over_shared_prefixes_is_priced_with_the_simulators_co_reads() -> None:
    from types import SimpleNamespace

    from latsim.costmodel.coreads import CoReads

    terms = CoReads(saving=0.5, ctas_per_sm=1.0, hbm_bandwidth=1e12, source="t").bind(64, 1, 1e12)  # one wave
    requests = pd.DataFrame({"input_tokens": [2000, 2000, 1500, 900, 3000],
                             "prefix_group": [0, 0, 1, 0, -1], "prefix_tokens": [1030, 1030, 500, 1030, 0]})
    cost = SimpleNamespace(coreads=terms)
    owners = np.array([0, 1, 2, 3, 4])
    # group 0: three readers of 1,024 tokens (block-aligned; the 900-token prompt holds 896), group 1 alone
    assert de.coread_saved(cost, owners, requests, 16) == round(0.5 * 2 * (1024 + 1024 + 896) / 3)
    assert de.coread_saved(SimpleNamespace(coreads=None), owners, requests, 16) == 0
    assert de.coread_saved(cost, owners, requests.drop(columns=["prefix_group"]), 16) == 0
