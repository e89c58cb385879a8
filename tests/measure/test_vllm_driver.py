"""The in-process vLLM driver, run against a fake engine with AsyncLLM's ``generate`` shape."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from latsim.measure.loadgen import LoadSpec
from latsim.measure.records import load_run
from latsim.measure.vllm_driver import (
    EngineSession,
    EngineSettings,
    Level,
    RunOptions,
    build_engine,
    engine_config_snapshot,
    run_levels,
    sweep_lengths,
    sweep_limit,
)
from latsim.workload.trace import RequestTrace
from tests.script_module import load_script

REPO = Path(__file__).resolve().parents[2]
FAKE_PARAMS = RunOptions(params=lambda n: n, warmup_requests=3)


@dataclass
class FakeCompletion:
    token_ids: list[int]


@dataclass
class FakeOutput:
    outputs: list[FakeCompletion]
    finished: bool
    metrics: Any = None


class FakeEngine:
    """Streams ``n`` tokens (``per_chunk`` per output) after ``ttft``, one output per ``itl``."""

    def __init__(self, ttft: float = 0.01, itl: float = 0.002, per_chunk: int = 1,
                 max_model_len: int = 4096, hang: bool = False, stats: bool = False) -> None:
        self.ttft, self.itl, self.per_chunk, self.hang = ttft, itl, per_chunk, hang
        self.stats = stats
        self.calls: list[tuple[str, list[int], int]] = []
        self.aborted: list[str] = []
        self.active: dict[str, int] = {}  # requests in flight per id prefix (text before the last '-')
        self.peak_active: dict[str, int] = {}
        self.vllm_config = SimpleNamespace(
            scheduler_config=SimpleNamespace(max_num_seqs=1024, max_num_batched_tokens=8192,
                                             enable_chunked_prefill=True, async_scheduling=False),
            cache_config=SimpleNamespace(block_size=16, num_gpu_blocks=1000, gpu_memory_utilization=0.9,
                                         enable_prefix_caching=True, cache_dtype="auto"),
            model_config=SimpleNamespace(max_model_len=max_model_len, dtype="torch.bfloat16",
                                         get_vocab_size=lambda: 50_000),
            parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1),
        )

    def shutdown(self) -> None:
        self.calls.append(("shutdown", [], 0))

    async def reset_prefix_cache(self) -> bool:
        self.calls.append(("reset_prefix_cache", [], 0))
        return True

    async def generate(self, prompt: dict[str, Any], params: int, request_id: str):
        ids = prompt["prompt_token_ids"]
        if len(ids) + params > self.vllm_config.model_config.max_model_len:
            raise ValueError(f"prompt of {len(ids)} + {params} tokens exceeds max_model_len")
        self.calls.append((request_id, ids, params))
        prefix = request_id.rsplit("-", 1)[0]
        self.active[prefix] = self.active.get(prefix, 0) + 1
        self.peak_active[prefix] = max(self.peak_active.get(prefix, 0), self.active[prefix])
        # vLLM's RequestStateStats: engine-core times on the monotonic clock, filled as they happen
        stats = SimpleNamespace(queued_ts=time.monotonic(), scheduled_ts=0.0, first_token_ts=0.0,
                                last_token_ts=0.0) if self.stats else None
        try:
            await asyncio.sleep(self.ttft / 2)
            if stats:
                stats.scheduled_ts = time.monotonic()
            await asyncio.sleep(self.ttft / 2)
            for start in range(0, params, self.per_chunk):
                if start:
                    await asyncio.sleep(self.itl)
                if stats:
                    stats.first_token_ts = stats.first_token_ts or time.monotonic()
                    stats.last_token_ts = time.monotonic()
                new = list(range(start, min(params, start + self.per_chunk)))
                yield FakeOutput([FakeCompletion(new)], finished=start + len(new) == params, metrics=stats)
                if self.hang:
                    await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.aborted.append(request_id)
            raise
        finally:
            self.active[prefix] -= 1


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def trace(n: int, gap: float = 0.0, inp: int = 32, out: int = 6, **kw: Any) -> RequestTrace:
    return RequestTrace.from_arrays(np.arange(n) * gap, [inp] * n, [out] * n, **kw)


def test_levels_are_measured_and_written(tmp_path: Path) -> None:
    engine = FakeEngine()
    levels = [Level("open", trace(5, 0.01)), Level("closed", trace(6), LoadSpec("concurrency", 2))]
    ms = run(run_levels(engine, levels, tmp_path, FAKE_PARAMS, {"model": {"name": "fake"}}))
    assert [len(m) for m in ms] == [5, 6]
    assert sum(rid.startswith("warmup-") for rid, _, _ in engine.calls) == 3
    loaded = load_run(tmp_path / "open")
    req = loaded.requests
    assert req["status"].eq("ok").all() and req["output_tokens_received"].eq(6).all()
    assert all(k == (1,) * 6 for k in req["chunk_tokens"])
    ttft = (req["first_token_s"] - req["sent_s"]).to_numpy()
    assert ttft.min() >= 0.0095 and np.median(ttft) < 0.02
    cfg = loaded.meta["engine_config"]
    assert cfg["kv_capacity_tokens"] == 16_000 and cfg["max_num_seqs"] == 1024
    assert cfg["chunked_prefill"] is True and cfg["prefix_caching"] is True and cfg["tp"] == 1
    assert set(cfg["versions"]) >= {"vllm", "torch", "gpu", "driver"}
    assert loaded.meta["level"] == "open" and loaded.meta["model"] == {"name": "fake"}
    assert load_run(tmp_path / "closed").meta["load"]["mode"] == "concurrency"
    # the prefix cache is emptied before each level, after the warm-up
    names = [c[0] for c in engine.calls]
    resets = [i for i, n in enumerate(names) if n == "reset_prefix_cache"]
    assert len(resets) == 2 and names[resets[0] - 1].startswith("warmup-")
    assert names[resets[1] - 1].startswith("open-") and names[resets[1] + 1].startswith("closed-")
    assert loaded.meta["prefix_cache_reset"] is True
    assert loaded.meta["client_gc"]["frozen_before"] is True and loaded.meta["client_gc"]["collections"] >= 0


def test_engine_timestamps_split_ttft_on_the_client_clock(tmp_path: Path) -> None:
    engine = FakeEngine(ttft=0.04, itl=0.005, stats=True)
    run(run_levels(engine, [Level("open", trace(4, 0.02))], tmp_path, FAKE_PARAMS, {"model": {"name": "fake"}}))
    req = load_run(tmp_path / "open").requests
    slack = 0.002  # the two clocks are read a few microseconds apart
    assert (req["engine_queued_s"] >= req["sent_s"] - slack).all()
    wait = req["engine_scheduled_s"] - req["engine_queued_s"]
    assert ((wait > 0.015) & (wait < 0.035)).all()  # the fake engine waits ttft/2 before scheduling
    assert (req["engine_first_token_s"] <= req["first_token_s"] + slack).all()
    assert (req["engine_first_token_s"] >= req["engine_scheduled_s"]).all()
    span = req["engine_last_token_s"] - req["engine_first_token_s"]
    assert (span >= 5 * 0.005 - slack).all()  # six tokens, five gaps of itl


def test_engine_timestamps_absent_when_the_engine_keeps_no_stats(tmp_path: Path) -> None:
    run(run_levels(FakeEngine(), [Level("open", trace(2))], tmp_path, FAKE_PARAMS, {"model": {"name": "fake"}}))
    req = load_run(tmp_path / "open").requests
    assert req["engine_queued_s"].isna().all() and req["engine_last_token_s"].isna().all()


def test_sweep_lengths_cover_each_bucket_three_ways() -> None:
    lengths = sweep_lengths(96, 8190)
    assert lengths.min() == 16 and lengths.max() <= 8190 and np.all(np.diff(lengths) > 0)
    anchors = lengths[lengths % 16 == 0]
    assert set(anchors + 1) <= set(lengths) and set(anchors + 2) <= set(lengths)
    assert len(anchors) >= 25 and anchors.max() >= 8000  # the largest steps too
    for lo, hi in [(513, 1024), (1025, 2048), (2049, 4096), (4097, 8190)]:  # eager-size buckets
        assert ((lengths >= lo) & (lengths <= hi)).sum() >= 3
    assert len(sweep_lengths(0, 8190)) == 0 and len(sweep_lengths(30, 8)) == 0
    assert sweep_limit({"max_num_batched_tokens": 8192, "max_model_len": 4096}) == 4094
    assert sweep_limit({"max_num_batched_tokens": 2048, "max_model_len": 8192}) == 2048


def test_warmup_sweep_sends_prompts_one_at_a_time() -> None:
    engine = FakeEngine()
    opts = RunOptions(params=lambda n: n, warmup_requests=2, warmup_sweep_requests=9)
    run(run_levels(engine, [Level("a", trace(2))], None, opts))
    sweep = [(len(ids), n) for rid, ids, n in engine.calls if rid.startswith("warmup-sweep-")]
    assert [i for i, _ in sweep] == list(sweep_lengths(9, 4094))  # budget 8192, max_model_len 4096
    assert all(n == 2 for _, n in sweep) and len(sweep) == 9
    assert engine.peak_active["warmup-sweep"] == 1  # one at a time
    assert engine.peak_active["warmup"] == 2  # the burst before it: all at once


def test_levels_never_repeat_prompts() -> None:
    """Request i of one level and request i of the next must not share a prefix."""
    engine = FakeEngine()
    run(run_levels(engine, [Level("a", trace(4)), Level("b", trace(4))], None,
                   RunOptions(params=lambda n: n, warmup_requests=4, warmup_max_input_tokens=32)))
    prompts = [ids for rid, ids, _ in engine.calls if ids]
    heads = {tuple(ids[:8]) for ids in prompts}
    assert len(prompts) == 12 and len(heads) == 12


def test_prompts_are_distinct_unless_a_prefix_is_shared() -> None:
    engine = FakeEngine()
    tr = trace(4, inp=40, prefix_group=[0, 0, -1, 1], prefix_tokens=[16, 16, 0, 16])
    run(run_levels(engine, [Level("p", tr)], None, RunOptions(params=lambda n: n, warmup_requests=0)))
    prompts = {rid: ids for rid, ids, _ in engine.calls if ids}
    a, b, c, d = (prompts[f"p-{i}"] for i in range(4))
    assert a[:16] == b[:16] and a[16:] != b[16:]
    assert len({a[0], c[0], d[0]}) == 3 and all(len(p) == 40 for p in (a, b, c, d))
    assert max(max(p) for p in prompts.values()) < 50_000  # the engine's vocabulary


def test_multi_token_deltas_are_counted() -> None:
    ms = run(run_levels(FakeEngine(per_chunk=3), [Level("x", trace(1, out=7))], None, FAKE_PARAMS))
    assert ms[0].requests["chunk_tokens"][0] == (3, 3, 1)
    assert ms[0].requests["output_tokens_received"][0] == 7


def test_rejected_request_is_an_error_record() -> None:
    engine = FakeEngine(max_model_len=64)
    ms = run(run_levels(engine, [Level("x", trace(2, inp=60, out=10))], None, FAKE_PARAMS))
    assert ms[0].requests["status"].tolist() == ["error", "error"]
    assert "exceeds max_model_len" in ms[0].requests["error"][0]


def test_hung_request_times_out_and_is_aborted() -> None:
    engine = FakeEngine(hang=True)
    load = LoadSpec(request_timeout_s=0.2)
    ms = run(run_levels(engine, [Level("x", trace(2, out=4), load)], None,
                        RunOptions(params=lambda n: n, warmup_requests=0)))
    assert ms[0].requests["status"].tolist() == ["timeout", "timeout"]
    assert sorted(engine.aborted) == ["x-0", "x-1"]


def test_missing_vllm_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"vllm is not importable; install latsim\[vllm\]"):
        build_engine(EngineSettings(model_dir="/nowhere"))


def test_engine_kwargs_leave_unset_knobs_to_vllm() -> None:
    kw = EngineSettings(model_dir="/m", max_num_seqs=64, enable_prefix_caching=False,
                        extra={"enforce_eager": True}).engine_kwargs()
    assert kw == {"model": "/m", "load_format": "dummy", "skip_tokenizer_init": True,
                  "max_num_seqs": 64, "enable_prefix_caching": False, "seed": 0, "enforce_eager": True}


def test_snapshot_of_unknown_engine_is_all_none() -> None:
    snap = engine_config_snapshot(object())
    assert snap["max_num_seqs"] is None and snap["kv_capacity_tokens"] is None


def test_level_name_must_be_a_plain_directory_name() -> None:
    with pytest.raises(ValueError, match=r"level name '\.\./x'"):
        Level("../x", trace(1))


def test_imports_pull_in_neither_simpy_nor_vllm() -> None:
    code = ("import sys, runpy; import latsim.measure.vllm_driver, latsim.measure.http_driver, "
            "latsim.measure.importers; runpy.run_path('scripts/device_measure.py'); "
            "bad = {'simpy', 'vllm', 'torch'} & set(sys.modules); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


# ------------------------------------------------------------------------ device script


def device_script() -> Any:
    return load_script(Path("device_measure.py"))


def test_device_script_shapes() -> None:
    dm = device_script()
    assert dm.parse_shape("fixed:in=512,out=128") == {"kind": "fixed", "in": 512, "out": 128}
    with pytest.raises(ValueError, match="--shape 'fixed:512'"):
        dm.parse_shape("fixed:512")
    rng = np.random.default_rng(0)
    inp, out = dm.sample_lengths(dm.parse_shape("mix"), 2000, rng, max_model_len=2048)
    assert inp.min() >= 1 and out.min() >= 8 and (inp + out).max() <= 2048
    assert 450 < np.median(inp) < 650 and 120 < np.median(out) < 180
    tr = dm.poisson_trace(50.0, 20.0, dm.parse_shape("mix"), rng, 8192)
    assert tr.arrival_s[0] == 0.0 and tr.arrival_s[-1] < 20.0 and 850 < len(tr) < 1150


def test_device_script_long_and_prefix_shapes() -> None:
    dm = device_script()
    rng = np.random.default_rng(1)
    inp, _ = dm.sample_lengths(dm.parse_shape("long"), 2000, rng, max_model_len=32768)
    assert inp.min() >= 1024 and inp.max() <= 24576 and 3000 < np.median(inp) < 5000
    shape = dm.parse_shape("prefix:len=1024,groups=4")
    tr = dm.make_trace(np.zeros(400), shape, rng, 8192)
    assert tr.has_prefixes and set(np.unique(tr.prefix_group)) == {0, 1, 2, 3}
    assert (tr.prefix_tokens == 1024).all() and (tr.input_tokens > 1024).all()
    assert not dm.make_trace(np.zeros(5), dm.parse_shape("mix"), rng, 8192).has_prefixes
    for bad in ("prefix:len=0,groups=4", "prefix:len=8", "longer"):
        with pytest.raises(ValueError, match="expected 'mix', 'long'"):
            dm.parse_shape(bad)


def test_device_script_flow_with_fake_engine(tmp_path: Path) -> None:
    dm = device_script()
    args = dm.parse_args(["--config-dir", str(tmp_path), "--shape", "fixed:in=32,out=8", "--burst", "20",
                          "--level-seconds", "0.5", "--fractions", "0.2,0.4", "--out", str(tmp_path)])

    async def flow() -> list[dict[str, Any]]:
        session = await EngineSession(FakeEngine(), FAKE_PARAMS, {"model": {"name": "fake"}}).start()
        return await dm.run_all(args, session, tmp_path / "fake-fixed", dm.time.monotonic())

    rows = asyncio.run(flow())
    assert [r["level"] for r in rows] == ["burst", "f0.20", "f0.40"]
    assert rows[0]["completed"] == 20 and all(r["completed"] == r["sent"] for r in rows)
    assert rows[2]["qps"] == pytest.approx(2 * rows[1]["qps"])
    assert 9 < rows[1]["ttft_p50"] < 20 and 1.5 < rows[1]["tpot_mean"] < 6
    for level in ("burst", "f0.20", "f0.40"):
        assert load_run(tmp_path / "fake-fixed" / level).meta["level"] == level
    dm.print_table(rows)
    (tmp_path / "fake-fixed" / "summary.json").write_text(json.dumps(rows))
    packed = dm.pack(tmp_path / "fake-fixed")
    assert [p.name for p in packed] == ["burst.tar.gz", "f0.20.tar.gz", "f0.40.tar.gz"]
    assert sorted(p.name for p in (tmp_path / "fake-fixed").iterdir()) == [
        "burst.tar.gz", "f0.20.tar.gz", "f0.40.tar.gz", "summary.json"]
    unpacked = tmp_path / "unpacked"
    for archive in packed:
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
    assert len(load_run(unpacked / "fake-fixed" / "f0.40")) == rows[2]["sent"]


def test_device_script_concurrency_sweep(tmp_path: Path) -> None:
    dm = device_script()
    args = dm.parse_args(["--config-dir", str(tmp_path), "--shape", "fixed:in=16,out=6", "--burst", "0",
                          "--fractions", "", "--concurrency-sweep", "1,3", "--sweep-waves", "2",
                          "--level-seconds", "20", "--out", str(tmp_path)])

    async def flow() -> list[dict[str, Any]]:
        session = await EngineSession(FakeEngine(), FAKE_PARAMS, {"model": {"name": "fake"}}).start()
        return await dm.run_all(args, session, tmp_path / "fake-fixed", dm.time.monotonic())

    rows = asyncio.run(flow())
    assert [r["level"] for r in rows] == ["c0001", "c0003"]
    assert [r["completed"] for r in rows] == [4, 6]  # at least 4 requests; else waves x concurrency
    run = load_run(tmp_path / "fake-fixed" / "c0003")
    assert run.meta["load"]["mode"] == "concurrency" and run.meta["load"]["concurrency"] == 3
    with pytest.raises(SystemExit):
        dm.parse_args(["--model", "x", "--concurrency-sweep", "4,0"])


def test_device_script_cpu_list() -> None:
    dm = device_script()
    assert dm.parse_args(["--model", "x", "--cpus", "0,2-4"]).cpus == [0, 2, 3, 4]
    assert dm.parse_args(["--model", "x"]).cpus == []
    with pytest.raises(SystemExit):
        dm.parse_args(["--model", "x", "--cpus", "0,a"])


def test_device_script_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    dm = device_script()
    engines: list[FakeEngine] = []
    settings: list[EngineSettings] = []

    def fake_build(s: EngineSettings) -> FakeEngine:
        settings.append(s)
        engines.append(FakeEngine())
        return engines[-1]

    pinned: list[list[int]] = []
    monkeypatch.setattr(dm.os, "sched_setaffinity", lambda pid, cpus: pinned.append(list(cpus)))
    monkeypatch.setattr(dm, "build_engine", fake_build)
    monkeypatch.setattr(dm, "RunOptions", lambda seed, **kw: RunOptions(seed=seed, params=lambda n: n, **kw))
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    dm.main(["--config-dir", str(cfg), "--model", "tiny", "--shape", "fixed:in=16,out=4", "--burst", "10",
             "--level-seconds", "0.3", "--fractions", "0.1", "--warmup", "4", "--warmup-sweep", "0",
             "--out", str(tmp_path / "out"), "--tar", "--cpus", "0-2,5",
             "--max-num-seqs", "64", "--engine-arg", "enforce_eager=true", "--engine-arg", "kv_cache_dtype=fp8"])
    assert engines[0].calls[-1][0] == "shutdown"
    warmup = [(len(ids), n) for rid, ids, n in engines[0].calls if rid.startswith("warmup-")]
    assert sorted(i for i, _ in warmup) == [16, 693, 1371, 2048]  # spread over 16..2048
    assert sorted(n for _, n in warmup) == [1, 43, 86, 128]  # and 1..128 tokens
    assert settings[0].max_num_seqs == 64
    assert pinned == [[0, 1, 2, 5]]
    assert settings[0].extra == {"enforce_eager": True, "kv_cache_dtype": "fp8"}
    root = tmp_path / "out" / "tiny-fixed-in16-out4"
    assert sorted(p.name for p in root.iterdir()) == ["burst.tar.gz", "f0.10.tar.gz", "summary.json"]
    assert [r["level"] for r in json.loads((root / "summary.json").read_text())] == ["burst", "f0.10"]
    assert capsys.readouterr().out.splitlines()[-1].split()[0] == "f0.10"


def test_device_script_shares_time_left_after_an_overrun() -> None:
    """A shape that overran its share must not starve the next one (seen on the device)."""
    import argparse
    import time

    dm = device_script()
    t_start = time.monotonic() - 100.0  # 100 s into a 400 s run
    args = argparse.Namespace(max_seconds=400.0, shape_end=time.monotonic() - 30.0)  # overran by 30 s
    deadline = dm.shape_deadline(args, t_start, 1)
    expected = 400.0 - 100.0 - dm.SHUTDOWN_MARGIN_S
    assert abs((deadline - time.monotonic()) - expected) < 1.0
    args.shape_end = deadline
    assert abs(dm.left(args, t_start) - expected) < 1.0
    assert abs(dm.shape_deadline(args, t_start, 2) - time.monotonic() - expected / 2) < 1.0


def test_device_script_model_lookup(tmp_path: Path) -> None:
    dm = device_script()
    with pytest.raises(SystemExit, match="not in the catalog"):
        dm.model_dir(dm.parse_args(["--model", "no-such-model"]), tmp_path)
    with pytest.raises(SystemExit, match=r"no config\.json there"):
        dm.model_dir(dm.parse_args(["--config-dir", str(tmp_path)]), tmp_path)


def test_host_probe_goes_into_each_level_meta(tmp_path: Path) -> None:
    opts = RunOptions(params=lambda n: n, warmup_requests=2, host_probe=True)
    run(run_levels(FakeEngine(), [Level("open", trace(5, 0.05))], tmp_path, opts))
    probe = load_run(tmp_path / "open").meta["host_probe"]
    assert probe["baseline_s"] > 0 and probe["summary"]["samples"] == len(probe["rows"]) >= 1
    assert probe["columns"][:2] == ["t_s", "probe_s"]
