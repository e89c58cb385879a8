"""``scripts/engine_core_share.py``: vLLM's engine-core step parts timed on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script_module import load_script


@pytest.fixture(scope="module")
def mod():  # type: ignore[no-untyped-def]
    return load_script(Path("engine_core_share.py"))


def test_lines_recover_a_straight_line_and_scale_it_to_the_reference_host(mod) -> None:  # type: ignore[no-untyped-def]
    parts = (*mod.DECODE_PARTS, *mod.PROMPT_PARTS)
    rows = [{"seqs": n, **{p: 0.05 + i * 0.001 + n * (i + 1) * 1e-3 for i, p in enumerate(parts)}} for n in (1, 8, 64)]
    out = mod.lines(rows, to_reference=2.0)
    for i, part in enumerate(parts):
        assert out[part]["a_ms"] == pytest.approx(0.05 + i * 0.001)
        assert out[part]["b_us"] == pytest.approx(i + 1.0)
        assert out[part]["a_ms_reference"] == pytest.approx(2 * (0.05 + i * 0.001))
        assert out[part]["b_us_reference"] == pytest.approx(2 * (i + 1.0))


@pytest.mark.parametrize("argv, bad", [
    (["--seqs", "0,4"], "'0,4'"), (["--seqs", "a"], "'a'"), (["--steps", "0"], "--steps 0"),
    (["--prompt", "-3"], "--prompt -3"),
])
def test_bad_arguments_exit_2_naming_the_value(mod, tmp_path: Path, capsys, argv: list[str], bad: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        mod.main(["--out", str(tmp_path / "x.json"), *argv])
    assert exc.value.code == 2
    assert bad in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_every_measured_step_decodes_all_sequences_and_a_joining_prompt_is_scheduled_whole(mod) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("vllm")
    engine = mod.Engine(seqs=3)
    for _ in range(mod.WARMUP_STEPS):
        engine.step({})
    times: dict[str, list[float]] = {}
    engine.step(times)
    assert engine.in_flight.total_num_scheduled_tokens == 3  # three decodes, no prompt left
    assert set(times) == set(mod.DECODE_PARTS)
    engine.add(40)
    engine.step(times, prefix="prompt_")
    assert engine.in_flight.total_num_scheduled_tokens == 3 + 40
    assert {"prompt_schedule", "prompt_send", "prompt_receive"} <= set(times)
    assert "prompt_update" not in times  # taking in the step before is not the prompt's


def test_a_run_writes_one_row_per_count_with_every_part_and_its_provenance(mod, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("vllm")
    out = tmp_path / "share.json"
    assert mod.main(["--out", str(out), "--seqs", "1,3", "--steps", "4", "--prompt", "32"]) == 0
    content = json.loads(out.read_text())
    assert content["format"] == mod.FORMAT and content["vllm"] == "0.25.1"
    assert [r["seqs"] for r in content["rows"]] == [1, 3]
    for row in content["rows"]:
        assert all(row[p] > 0 for p in (*mod.DECODE_PARTS, *mod.PROMPT_PARTS))
    probes = sorted(r["probe_ms"] for r in content["rows"])
    assert content["probe"]["here_s"] == pytest.approx((probes[0] + probes[1]) / 2e3)  # their median
    probe = content["probe"]
    assert probe["to_reference"] == pytest.approx(probe["reference_s"] / probe["here_s"])
    assert set(content["lines"]) == {*mod.DECODE_PARTS, *mod.PROMPT_PARTS}
    assert content["provenance"]["inputs"] == {"seqs": [1, 3], "steps": 4, "prompt": 32}
