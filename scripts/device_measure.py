"""Measure one vLLM engine at several loads on a GPU machine; plain python3, no simpy needed.

Run from the repository root, e.g. on the H200 machine with the vLLM bundle unpacked:

    PYTHONPATH=/tmp/site:. VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 \\
        python3 scripts/device_measure.py --model qwen2.5-7b --shape mix --tar

It starts ONE AsyncLLM (dummy weights from the model's config.json; with ``--checkpoint-weights``
quantized weights filled like a checkpoint's, ``checkpoint_weights.py``), then
1. a saturation burst (``--burst`` requests at t=0) whose completion rate estimates capacity;
2. Poisson levels at ``--fractions`` of that capacity, each ``--level-seconds`` long;
3. closed-loop levels at each of ``--concurrency-sweep`` (``c0064``: 64 requests in flight,
   ``--sweep-waves`` x 64 requests in all), the decode-step times of which measure the
   engine's host time per step against batch size (``scripts/host_steps.py``);
and writes each level's run directory to ``OUT/<model>-<shape>/<level>/`` (OUT = ``--out``,
default ``$OUT``), plus ``summary.json``; with ``--tar`` each level folder becomes
``OUT/<model>-<shape>/<level>.tar.gz`` (the device brings back at most 8 files, 16 MiB
each; unpack them all in one place to rebuild the tree).  The table printed
last has, per level: offered qps, completed requests, mean/p50/p99 TTFT and mean/p99 TPOT (ms).
``--max-seconds`` bounds the whole run, engine start included: levels are shortened or
skipped to fit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from latsim.measure.loadgen import LoadSpec
from latsim.measure.measurement import Measurement
from latsim.measure.vllm_driver import EngineSession, EngineSettings, Level, RunOptions, build_engine
from latsim.workload.trace import RequestTrace

CATALOG = Path(__file__).resolve().parent.parent / "latsim" / "data" / "catalog" / "models"
MIX = {"in": (600.0, 0.8, 32, 4096), "out": (150.0, 0.6, 8, 1024)}  # median, sigma, lo, hi
LONG = {"in": (4096.0, 0.8, 1024, 24576), "out": (150.0, 0.6, 8, 512)}
SHUTDOWN_MARGIN_S = 20.0


# ------------------------------------------------------------------------------- workload


def parse_shape(text: str) -> dict[str, Any]:
    """A shape description from its flag text (ValueError otherwise):

    * ``mix``: lognormal input and output lengths (:data:`MIX`);
    * ``long``: long prompts (:data:`LONG`, 1k-24k tokens);
    * ``fixed:in=N,out=M``;
    * ``prefix:len=L,groups=G``: ``mix`` lengths after one of ``G`` shared ``L``-token prefixes
      (drawn uniformly per request), so every prompt is ``L`` + a ``mix`` input long.
    """
    if text in ("mix", "long"):
        return {"kind": text, **{k: list(v) for k, v in (MIX if text == "mix" else LONG).items()}}
    m = re.fullmatch(r"fixed:in=(\d+),out=(\d+)", text)
    if m:
        return {"kind": "fixed", "in": int(m.group(1)), "out": int(m.group(2))}
    m = re.fullmatch(r"prefix:len=(\d+),groups=(\d+)", text)
    if m and int(m.group(1)) > 0 and int(m.group(2)) > 0:
        return {"kind": "prefix", "prefix_len": int(m.group(1)), "groups": int(m.group(2)),
                **{k: list(v) for k, v in MIX.items()}}
    raise ValueError(f"--shape {text!r}: expected 'mix', 'long', 'fixed:in=N,out=M' or "
                     "'prefix:len=L,groups=G' (L, G >= 1)")


def sample_lengths(shape: dict[str, Any], n: int, rng: np.random.Generator,
                   max_model_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Input and output lengths for ``n`` requests, clipped so that each fits ``max_model_len``."""
    if shape["kind"] == "fixed":
        inp, out = np.full(n, shape["in"]), np.full(n, shape["out"])
    else:
        inp, out = (_lognormal(rng, n, *shape[k]) for k in ("in", "out"))
        inp = inp + shape.get("prefix_len", 0)
    out = np.minimum(out, max_model_len // 2)
    return np.maximum(1, np.minimum(inp, max_model_len - out)), out


def make_trace(arrivals: np.ndarray, shape: dict[str, Any], rng: np.random.Generator,
               max_model_len: int) -> RequestTrace:
    """Requests of ``shape`` arriving at ``arrivals``; a ``prefix`` shape's carry their group."""
    inp, out = sample_lengths(shape, len(arrivals), rng, max_model_len)
    if shape["kind"] != "prefix":
        return RequestTrace.from_arrays(arrivals, inp, out)
    groups = rng.integers(0, shape["groups"], len(arrivals))
    return RequestTrace.from_arrays(arrivals, inp, out, prefix_group=groups,
                                    prefix_tokens=np.minimum(shape["prefix_len"], inp))


def _lognormal(rng: np.random.Generator, n: int, median: float, sigma: float, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.round(rng.lognormal(np.log(median), sigma, n)), lo, hi).astype(np.int64)


def poisson_trace(qps: float, seconds: float, shape: dict[str, Any], rng: np.random.Generator,
                  max_model_len: int) -> RequestTrace:
    """Poisson arrivals at ``qps`` over ``[0, seconds)`` (at least one request)."""
    gaps = rng.exponential(1.0 / qps, int(qps * seconds * 1.5) + 20)
    arrivals = np.cumsum(gaps) - gaps[0]  # starts at 0, so never empty
    return make_trace(arrivals[arrivals < seconds], shape, rng, max_model_len)


# ---------------------------------------------------------------------------------- model


def model_dir(args: argparse.Namespace, tmp: Path) -> tuple[str, str]:
    """(directory holding config.json, model name) from ``--model`` or ``--config-dir``."""
    if args.config_dir:
        path = Path(args.config_dir)
        if not (path / "config.json").is_file():
            raise SystemExit(f"--config-dir {path}: no config.json there")
        return str(path), args.model or path.name
    src = CATALOG / f"{args.model}.json"
    if not src.is_file():
        names = sorted(p.stem for p in CATALOG.glob("*.json"))
        raise SystemExit(f"--model {args.model!r} is not in the catalog ({CATALOG}); known: {names}")
    (tmp / "config.json").write_text(src.read_text())
    return str(tmp), args.model


def settings_from(args: argparse.Namespace, path: str) -> EngineSettings:
    extra = {}
    for item in args.engine_arg:
        key, _, value = item.partition("=")
        try:
            extra[key] = json.loads(value)
        except json.JSONDecodeError:
            extra[key] = value
    return EngineSettings(
        model_dir=path, max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
        enable_prefix_caching=args.prefix_caching, dtype=args.dtype, seed=args.seed, extra=extra)


# -------------------------------------------------------------------------------- summary


def summarize(name: str, qps: float | None, m: Measurement) -> dict[str, Any]:
    """Client-side TTFT (first token - sent) and TPOT ((finish - first) / (tokens - 1)), ms."""
    f = m.records_frame()
    ok = f[f["status"] == "ok"]
    ttft = (ok["first_token_s"] - ok["arrival_s"]).to_numpy() * 1e3
    multi = ok[ok["output_tokens"] > 1]
    tpot = ((multi["finish_s"] - multi["first_token_s"]) / (multi["output_tokens"] - 1)).to_numpy() * 1e3
    q = lambda a, p: float(np.percentile(a, p)) if len(a) else float("nan")  # noqa: E731
    return {"level": name, "qps": qps, "sent": len(f), "completed": len(ok),
            "ttft_mean": float(ttft.mean()) if len(ttft) else float("nan"),
            "ttft_p50": q(ttft, 50), "ttft_p99": q(ttft, 99),
            "tpot_mean": float(tpot.mean()) if len(tpot) else float("nan"), "tpot_p99": q(tpot, 99)}


def capacity_rps(m: Measurement) -> float:
    """Completed requests per second of a burst: ok count / last ok finish."""
    ok = m.requests[m.requests["status"] == "ok"]
    return len(ok) / float(ok["finish_s"].max()) if len(ok) else 0.0


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'level':>8} {'qps':>8} {'done':>6} {'TTFT mean':>10} {'p50':>8} {'p99':>9} "
          f"{'TPOT mean':>10} {'p99':>8}")
    for r in rows:
        qps = f"{r['qps']:.2f}" if r["qps"] is not None else r["level"]
        print(f"{r['level']:>8} {qps:>8} {r['completed']:>6} {r['ttft_mean']:>10.1f} {r['ttft_p50']:>8.1f} "
              f"{r['ttft_p99']:>9.1f} {r['tpot_mean']:>10.2f} {r['tpot_p99']:>8.2f}")


# ---------------------------------------------------------------------------------- levels


async def measure(args: argparse.Namespace, settings: EngineSettings,
                  runs: list[tuple[str, Path, dict[str, Any]]], t_start: float) -> list[list[dict[str, Any]]]:
    """One engine, then each ``(shape, root, meta)`` in turn, sharing the time left equally."""
    engine = build_engine(settings)
    results = []
    try:
        print(f"engine ready after {time.monotonic() - t_start:.0f} s", flush=True)
        for i, (shape, root, meta) in enumerate(runs):
            args.shape = shape
            args.shape_end = shape_deadline(args, t_start, len(runs) - i)
            warm = args.warmup if i == 0 else 0  # the first shape's warm-up serves the engine
            options = RunOptions(seed=args.seed, warmup_requests=warm, warmup_max_input_tokens=2048,
                                 warmup_max_output_tokens=128,
                                 warmup_sweep_requests=args.warmup_sweep if i == 0 else 0,
                                 host_probe=args.host_probe)
            session = await EngineSession(engine, options, meta).start()
            print(f"{time.strftime('%H:%M:%S')} warm-up done; measuring {shape}", flush=True)
            results.append(await run_all(args, session, root, t_start))
    finally:
        engine.shutdown()
    return results


def whole_left(args: argparse.Namespace, t_start: float) -> float:
    """Seconds left of the whole run before shutting down."""
    return args.max_seconds - (time.monotonic() - t_start) - SHUTDOWN_MARGIN_S


def shape_deadline(args: argparse.Namespace, t_start: float, shapes_left: int) -> float:
    """When the next shape must end: an equal share of the whole run's time left (whatever an
    earlier shape overran)."""
    return time.monotonic() + whole_left(args, t_start) / shapes_left


def left(args: argparse.Namespace, t_start: float) -> float:
    """Seconds left for the current shape (its share of the run) before shutting down."""
    return min(whole_left(args, t_start), getattr(args, "shape_end", float("inf")) - time.monotonic())


async def run_all(args: argparse.Namespace, session: EngineSession, root: Path,
                  t_start: float) -> list[dict[str, Any]]:
    rng = np.random.default_rng(args.seed)
    shape, max_len = parse_shape(args.shape), int(session.meta["engine_config"]["max_model_len"] or 4096)
    n, cap, rows = args.burst, 0.0, []
    if n > 0:
        burst = make_trace(np.zeros(n), shape, rng, max_len)
        budget = max(10.0, min(args.burst_seconds, left(args, t_start) / 3))
        m = await session.run(Level("burst", burst, LoadSpec("burst", deadline_s=budget,
                                                             request_timeout_s=budget)), root)
        cap = capacity_rps(m)
        rows.append(summarize("burst", None, m))
        print(f"capacity estimate: {cap:.2f} req/s ({rows[0]['completed']}/{n} done)", flush=True)
    for frac in args.fractions if n > 0 else []:
        row = await run_fraction(args, session, root, t_start, frac, cap, shape, max_len, rng)
        if row is None:
            break
        rows.append(row)
    for concurrency in args.concurrency_sweep:
        row = await run_concurrency(args, session, root, t_start, concurrency, shape, max_len, rng)
        if row is None:
            break
        rows.append(row)
    return rows


async def run_concurrency(args: argparse.Namespace, session: EngineSession, root: Path, t_start: float,
                          concurrency: int, shape: dict[str, Any], max_len: int,
                          rng: np.random.Generator) -> dict[str, Any] | None:
    """One closed-loop level: ``concurrency`` requests in flight, ``--sweep-waves`` times as many
    requests in all; ``None`` when too little time is left."""
    budget = min(args.level_seconds, left(args, t_start))
    if budget < 5.0:
        print(f"skipping concurrency {concurrency} and later: {left(args, t_start):.0f} s left", flush=True)
        return None
    n = max(4, args.sweep_waves * concurrency)
    trace = make_trace(np.zeros(n), shape, rng, max_len)
    name = f"c{concurrency:04d}"
    m = await session.run(Level(name, trace, LoadSpec("concurrency", concurrency=concurrency,
                                                      request_timeout_s=budget, deadline_s=budget)), root)
    print(f"{time.strftime('%H:%M:%S')} {name}: {n} requests", flush=True)
    return summarize(name, None, m)


async def run_fraction(args: argparse.Namespace, session: EngineSession, root: Path, t_start: float,
                       frac: float, cap: float, shape: dict[str, Any], max_len: int,
                       rng: np.random.Generator) -> dict[str, Any] | None:
    drain = max(10.0, min(60.0, args.level_seconds / 2))
    seconds = min(args.level_seconds, left(args, t_start) - drain)
    if seconds < min(5.0, args.level_seconds) or cap <= 0:
        print(f"skipping fraction {frac} and later: {left(args, t_start):.0f} s left", flush=True)
        return None
    qps = frac * cap
    trace = poisson_trace(qps, seconds, shape, rng, max_len)
    load = LoadSpec("open", request_timeout_s=seconds + drain, deadline_s=seconds + drain)
    name = f"f{frac:.2f}"
    m = await session.run(Level(name, trace, load), root)
    print(f"{time.strftime('%H:%M:%S')} {name}: {len(trace)} requests over {seconds:.0f} s "
          f"at {qps:.2f} req/s", flush=True)
    return summarize(name, qps, m)


# ------------------------------------------------------------------------------------ main


def _cpu_list(text: str) -> list[int]:
    """``0,2,4`` or ``0-7`` (or both, comma separated) -> CPU numbers."""
    cpus: list[int] = []
    try:
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected CPU numbers like 0,2,4 or 0-7") from None
    return cpus


def _ints(text: str) -> list[int]:
    values = [int(x) for x in text.split(",") if x]
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every concurrency must be >= 1")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="name in latsim/data/catalog/models/ (a label with --config-dir)")
    p.add_argument("--config-dir", help="a directory holding an HF config.json")
    p.add_argument("--shape", action="append", help="'mix' or 'fixed:in=N,out=M'; repeat for several "
                   "shapes on one engine (default: mix)")
    p.add_argument("--fractions", type=lambda s: [float(x) for x in s.split(",") if x],
                   default=[0.25, 0.5, 0.75, 0.9])
    p.add_argument("--burst", type=int, default=300, help="requests in the saturation burst")
    p.add_argument("--concurrency-sweep", type=_ints, default=[],
                   help="comma-separated requests in flight, one closed-loop level each (after the fractions)")
    p.add_argument("--sweep-waves", type=int, default=2, help="requests per sweep level / its concurrency")
    p.add_argument("--burst-seconds", type=float, default=120.0, help="deadline of the burst")
    p.add_argument("--level-seconds", type=float, default=60.0)
    p.add_argument("--max-seconds", type=float, default=540.0, help="whole run, engine start included")
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--tar", action="store_true", help="pack the run tree into one .tar.gz")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=512, help="requests in the unrecorded warm-up burst "
                   "(inputs 16..2048, outputs 1..128 tokens)")
    p.add_argument("--warmup-sweep", type=int, default=96, help="prompts sent one at a time after the "
                   "warm-up burst, lengths 16..token budget (compiles every MoE kernel variant)")
    p.add_argument("--host-probe", action=argparse.BooleanOptionalAction, default=True,
                   help="record the host's CPU speed, steal and the engine's CPU waits per level")
    p.add_argument("--cpus", type=_cpu_list, default=[], help="CPUs the driver and the engine processes "
                   "it starts may run on (comma list; default: all); recorded in each run's meta")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--dtype")
    p.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--engine-arg", action="append", default=[], help="KEY=JSON, any AsyncEngineArgs")
    p.add_argument("--checkpoint-weights", action="store_true",
                   help="fill packed 4-bit weights, zero points and FP8 weights like a real checkpoint "
                        "(scripts/checkpoint_weights.py) instead of vLLM's dummy fill")
    args = p.parse_args(argv)
    if not (args.model or args.config_dir):
        p.error("give --model NAME, --config-dir DIR, or both")
    args.shapes = args.shape or ["mix"]
    args.shape = args.shapes[0]  # the shape being measured; measure() moves it along
    try:
        for shape in args.shapes:
            parse_shape(shape)
    except ValueError as exc:
        p.error(str(exc))
    return args


def pack(root: Path) -> list[Path]:
    """Each ``root/<level>/`` -> ``root/<level>.tar.gz`` (atomic), the folder then removed.

    Members are named ``<root name>/<level>/...``, so unpacking every archive in one place
    rebuilds the tree.  One archive per level keeps each file under the device's 16 MiB cap.
    """
    out = []
    for level in sorted(p for p in root.iterdir() if p.is_dir()):
        target = root / f"{level.name}.tar.gz"
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".pack.")
        with os.fdopen(fd, "wb") as fh, tarfile.open(fileobj=fh, mode="w:gz") as tar:
            tar.add(level, arcname=f"{root.name}/{level.name}")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        shutil.rmtree(level)
        out.append(target)
    return out


def main(argv: list[str] | None = None) -> None:
    t_start = time.monotonic()
    args = parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, args.cpus)  # children (the engine core) inherit it
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        path, name = model_dir(args, Path(tmp))
        config = json.loads((Path(path) / "config.json").read_text())
        if args.checkpoint_weights:
            from checkpoint_weights import install  # scripts/ is on the path when run by path

            install(Path(tmp) / "plugin")
        runs = []
        for shape in args.shapes:
            shape_tag = shape.replace(":", "-").replace(",", "-").replace("=", "")
            meta = {"model": {"name": name, "config": config,
                              "weights": "checkpoint-like" if args.checkpoint_weights else "dummy"},
                    "workload": {"shape": parse_shape(shape), "seed": args.seed},
                    "host": {"cpus": cpus, "pinned": bool(args.cpus)}}
            runs.append((shape, Path(args.out) / f"{name}-{shape_tag}", meta))
        results = asyncio.run(measure(args, settings_from(args, path), runs, t_start))
    for (shape, root, _), rows in zip(runs, results, strict=True):
        tmp_summary = root / ".summary.json.tmp"
        tmp_summary.write_text(json.dumps(rows, indent=2) + "\n")
        os.replace(tmp_summary, root / "summary.json")
        if args.tar:
            for archive in pack(root):
                size = archive.stat().st_size / 2**20
                print(f"packed {archive} ({size:.1f} MiB{', OVER the 16 MiB cap' if size > 16 else ''})")
        print(f"== {name} {shape}")
        print_table(rows)


if __name__ == "__main__":
    main()
