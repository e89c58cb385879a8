"""scripts/trace_vs_model.py: a profiled engine's steps rebuilt and priced by the cost model."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from latsim.costmodel.batch import BatchShape
from tests.script_module import load_script

tv = load_script(Path("trace_vs_model.py"))

FIELDS = ("scenario", "step", "prefill_reqs", "prefill_tokens", "decode_reqs", "decode_tokens", "gpu_busy_us",
          "attention_us")


def test_chunks_are_placed_after_the_chunks_of_their_prompt() -> None:
    placer = tv.ChunkPlacer(prompt_tokens=16384, budget=8192)
    # the window opens on a full chunk whose predecessor is unseen: unknown until its prompt ends
    got = [placer.place(chunk, 64) for chunk in (8128, 8128, 128, 8128, 8128, 128)]
    assert got == [None, None, 16256, 0, 8128, 16256]


def test_a_prompt_within_the_budget_is_one_chunk_at_context_zero() -> None:
    placer = tv.ChunkPlacer(prompt_tokens=2048, budget=8192)
    assert [placer.place(2048, 0), placer.place(2048, 0)] == [0, 0]
    placer = tv.ChunkPlacer(prompt_tokens=512, budget=8192)
    assert placer.place(512, 95) == 0


def test_a_burst_packs_whole_prompts_and_cuts_the_last_at_the_budget() -> None:
    placer = tv.BurstPlacer(prompt_tokens=1000, count=10)
    # 8 whole prompts and 192 tokens of the ninth, then its other 808 and the tenth
    assert placer.place(8192, 9) == [(1000, 0)] * 8 + [(192, 0)]
    assert placer.place(1808, 2) == [(808, 192), (1000, 0)]
    assert placer.left == [0] * 10


def test_a_burst_step_that_does_not_fit_the_packing_is_refused_and_takes_nothing() -> None:
    placer = tv.BurstPlacer(prompt_tokens=512, count=4)
    assert placer.place(2048, 3) is None  # three prompts cannot hold 2,048 tokens
    assert placer.place(512, 2) is None  # the first prompt's 512 tokens leave the second none
    assert placer.place(2048, 5) is None  # only four prompts
    assert placer.left == [512] * 4
    assert placer.place(2048, 4) == [(512, 0)] * 4


def test_a_burst_s_steps_are_priced_with_all_their_chunks(tmp_path: Path) -> None:
    folder = tmp_path / "burst"
    folder.mkdir()
    label = "burst:in=512,n=20"
    meta = {"argv": ["scripts/device_trace.py", "--model", "llama-3.1-8b"],
            "scenarios": [{"scenario": {"kind": "burst", "label": label, "in": 512, "n": 20}}],
            "engine_config": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}}
    (folder / "timings.json").write_text(json.dumps(meta))
    with (folder / "steps.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(FIELDS)
        writer.writerows([(label, 0, 16, 8192, 0, 0, 180000.0, 9000.0), (label, 1, 4, 2048, 0, 0, 50000.0, 2000.0),
                          (label, 2, 0, 0, 0, 0, 100.0, 0.0)])
    rows = tv.step_rows(folder)
    assert [(r["prefill_reqs"], r["prefill_tokens"], r["unplaced"]) for r in rows] == [(16, 8192, False),
                                                                                    (4, 2048, False)]
    cm = tv.cost_model(meta, 1.0)
    sixteen = BatchShape.from_chunks([(512, 0)] * 16, [])
    assert rows[0]["model_us"] == pytest.approx(1e6 * cm.kernel_s(sixteen))
    # sixteen chunks in one call by the n-times-the-heads rule: far less than sixteen lone calls,
    # and what the shipped profile (which carries the rule) prices, within its tables' interpolation
    lone_us = 1e6 * cm.inner.attention_s(BatchShape.from_chunks([(512, 0)], [])) * cm.host.gpu_scale
    assert 0.0 < rows[0]["model_attention_heads_us"] < 0.5 * 16 * lone_us
    assert rows[0]["model_attention_heads_us"] == pytest.approx(rows[0]["model_attention_us"], rel=0.1)
    assert {s["steps"] for s in tv.summary(rows)} == {"prefill x16", "prefill x4"}


def test_decode_context_prefers_the_recorded_one() -> None:
    assert tv.decode_context({"context_at_profile": [800, 1000], "scenario": {"in": 512}}) == 900
    assert tv.decode_context({"decode_itl_quiet_ms": 10.0, "scenario": {"din": 1024}}) == 1124
    assert tv.decode_context({"scenario": {"in": 512}}) == 512


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "trace"
    folder.mkdir()
    scenarios = [{"scenario": {"kind": "decode", "label": "decode:seqs=64,in=512", "seqs": 64, "in": 512},
                  "context_at_profile": [700, 700]},
                 {"scenario": {"kind": "chunked", "label": "chunked:in=16384,n=1,decodes=64,din=1024",
                               "in": 16384, "n": 1, "decodes": 64, "din": 1024}, "decode_itl_quiet_ms": 10.0}]
    meta = {"argv": ["scripts/device_trace.py", "--model", "llama-3.1-8b", "--engine-arg", "max_model_len=32768"],
            "scenarios": scenarios, "engine_config": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}}
    (folder / "timings.json").write_text(json.dumps(meta))
    steps = [("decode:seqs=64,in=512", 0, 0, 0, 64, 64, 6000.0, 2000.0),
             ("chunked:in=16384,n=1,decodes=64,din=1024", 0, 1, 8128, 64, 64, 200000.0, 40000.0),
             ("chunked:in=16384,n=1,decodes=64,din=1024", 1, 1, 8128, 64, 64, 210000.0, 60000.0),
             ("chunked:in=16384,n=1,decodes=64,din=1024", 2, 1, 128, 64, 64, 9000.0, 4000.0)]
    with (folder / "steps.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(FIELDS)
        writer.writerows(steps)
    return folder


def test_steps_are_priced_as_the_model_prices_their_shape(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    rows = tv.step_rows(folder)
    assert [r["unplaced"] for r in rows] == [False, True, True, False]
    decode, last = rows[0], rows[3]
    cm = tv.cost_model(json.loads((folder / "timings.json").read_text()), 1.0)
    shape = BatchShape.from_chunks([], [700] * 64)
    assert decode["model_us"] == pytest.approx(1e6 * cm.inner.step_time(shape) * cm.host.gpu_scale)
    assert decode["model_full_us"] == decode["model_capped_us"] == decode["model_us"]  # a light step
    assert 0.0 < decode["model_attention_us"] < decode["model_us"]
    assert (last["prefill_context"], last["decode_reqs"]) == (16256, 64)
    assert last["rest_us"] == pytest.approx(5000.0)
    summary = tv.summary(rows)
    assert {(s["scenario"][:6], s["steps"], s["n"]) for s in summary} == {("decode", "decode", 1),
                                                                          ("chunke", "prefill+decode", 1)}


def test_main_prints_a_table_writes_csv_and_refuses_a_folder_without_a_trace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path)
    assert tv.main([str(folder), "--csv", str(tmp_path / "out.csv")]) == 0
    out = capsys.readouterr().out
    assert "decode:seqs=64,in=512" in out and "2 steps unplaced" in out
    assert len(list(csv.DictReader((tmp_path / "out.csv").open()))) == 2
    assert tv.main([str(tmp_path)]) == 2
    assert "steps.csv not found" in capsys.readouterr().err


def test_a_trace_is_priced_on_the_gpu_it_recorded_and_with_a_given_profile(tmp_path: Path) -> None:
    """A trace that names its GPU is priced on that GPU (the H100's imported profile prices the same
    decode step differently from the H200's); ``--profile`` swaps the profile, ``--device`` the GPU."""
    folder = _folder(tmp_path)
    on_h200 = tv.step_rows(folder)[0]["model_us"]
    meta = json.loads((folder / "timings.json").read_text())
    assert tv.run_device(meta) == "h200"  # traces before the GPU was recorded ran on the H200
    meta["gpu_name"] = "NVIDIA H100 80GB HBM3"
    (folder / "timings.json").write_text(json.dumps(meta))
    assert tv.run_device(meta) == "h100"
    on_h100 = tv.step_rows(folder)[0]["model_us"]
    assert on_h100 != pytest.approx(on_h200, rel=1e-3)
    assert tv.step_rows(folder, device="h200")[0]["model_us"] == pytest.approx(on_h200)
    profiles = Path(__file__).resolve().parents[2] / "latsim" / "data" / "calibration"
    assert tv.step_rows(folder, profile=profiles / "h100")[0]["model_us"] == pytest.approx(on_h100)
    assert tv.step_rows(folder, "h200", profiles / "h200-aic")[0]["model_us"] != pytest.approx(on_h200, rel=1e-3)
    with pytest.raises(ValueError, match="not device 'h100'"):
        tv.step_rows(folder, profile=profiles / "h200")  # a profile measured on another GPU


def test_main_refuses_a_profile_folder_that_is_not_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path)
    assert tv.main([str(folder), "--profile", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("trace", ["data/traces/h100/s48/moe2-qwen3-30b-a3b", "data/traces/h200/s26/gl-qwen3-30b-a3b"])
def test_a_mixture_of_experts_decode_is_priced_at_its_padded_graph(trace: str) -> None:
    """Qwen3-30B-A3B's decode steps of 5 and 11 sequences took the kernel time of 8 and 16 on both
    GPUs: priced with the padded graph's experts each is within 10 % of the traced kernels, where
    the experts of its own tokens alone price it 11-17 % fast."""
    folder = ROOT / trace
    meta = json.loads((folder / "timings.json").read_text())
    cm = tv.cost_model(meta, 1.0, folder, tv.run_device(meta))
    rows = [r for r in tv.step_rows(folder) if not r["unplaced"] and r["prefill_tokens"] == 0]
    for seqs in (5, 11):
        group = [r for r in rows if r["decode_reqs"] == seqs]
        assert len(group) > 20
        busy = statistics.median(r["gpu_busy_us"] for r in group)
        model = statistics.median(r["model_us"] for r in group)
        pad = 1e6 * cm.padding_s(seqs) * cm.host.gpu_scale
        assert 0.9 < model / busy < 1.1
        assert (model - pad) / busy < 0.92
