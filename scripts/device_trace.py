"""Per-kernel time of a live vLLM engine's steps, for checking the cost model step by step.

Runs on the GPU machine (vLLM on ``PYTHONPATH``, see ../shared/DEVICE-VLLM.md).  One engine
(dummy weights, the OpenAI server's defaults plus the engine arguments given; with
``--checkpoint-weights`` quantized weights filled like a checkpoint's, ``checkpoint_weights.py``:
the dummy fill leaves 4-bit weights zero and fp8 ones nearly so, which draws little power), then
scenarios,
each one a batch of steps of a known composition:

* ``decode:seqs=S,in=I`` - S requests of I prompt tokens and long outputs; once every one has
  its first token the engine runs pure decode steps of S sequences;
* ``prefill:in=I,n=N`` - N prompts of I tokens sent one after another (each alone, one output
  token): N prefill steps of I tokens (chunks of the token budget when I is above it);
* ``chunked:in=I,n=N,decodes=D,din=J`` - D decoding requests of J prompt tokens in the
  background, then N prompts of I tokens one after another: steps of a prefill chunk at a
  growing cached context beside D decodes (the long-prompt workload's steps); with
  ``prefix=P,groups=G`` the decoders share G prefixes of P tokens as ``shared``'s do (a step that
  carries a prompt beside decodes over shared prefix blocks);
* ``graphless:in=I,n=N,decodes=D,din=J`` - the same steps, never profiled: D decoders (0: none),
  then N prompts of I tokens one at a time, each sent at a random phase of the decode step;
  per prompt its TTFT, its send time and the decoders' emissions around it (:func:`graphless`),
  from which the launch of the prompt's step and its end are read (``scripts/graphless_steps.py``);
* ``burst:in=I,n=N`` - N prompts of I tokens sent at once (one output token each): the engine
  packs them into steps of the token budget, several prompts' chunks in one step and one
  attention call (``scripts/trace_vs_model.py`` places each step's chunks; the fifty-sixth
  session's bursts of Gemma-2-9B and of Llama-3.1-8B at TP=2 read their prompts' time priced
  8-14 % slow, ``docs/validation.md``, "Prompt throughput in the bursts");
* ``prefixed:in=I,prefix=P,n=N`` - prefix-cache hits: one request leaves a shared prefix of P
  tokens cached, then N prompts of that prefix and I tokens of their own one after another (each
  alone, one output token): N steps of I new tokens after P cached (``scripts/prefix_steps.py``
  prices them);
* ``shared:seqs=S,in=I,prefix=P,groups=G`` - as ``decode``, each of the S requests one of G
  shared prefixes of P tokens (cached first) and I tokens of its own: decode steps whose
  sequences read the same prefix blocks (against ``decode:seqs=S,in=P+I``, which share none).

Every scenario is bracketed by a one-second host probe (``host_speed_before`` /
``host_speed_after`` in its result), and the host probe's series runs beside them all
(``host_series``: the engine's busiest thread's CPU timed every 0.1 s), since the VM's CPU
changes speed within seconds (``scripts/launch_speed_share.py`` reads each prompt's launch beside
it).  (A first version could spin CPU-bound processes during a scenario, ``load=L``; on the lent
VM, one thread per core, they left the probe where it was, and the option was dropped; its run
is ``data/traces/h200/s26/gl-phi-3-mini-load``.)

Each scenario is timed twice: first without the profiler (the client's token times: the step
time the engine really gives), then with the torch profiler on for a few steps.  The trace
is reduced here (:func:`summarize_trace`) to one row per step - GPU busy time per kernel
class, the kernels' span, the step's CPU window - and one row per kernel name; those CSVs,
the unprofiled timings, the host speed and the engine's config come back in ``--out`` (with
the model's ``config.json`` for a ``--config-dir`` run).

    python3 scripts/device_trace.py --config-dir DIR --out $OUT/trace70b \\
        --scenario decode:seqs=150,in=512 --scenario prefill:in=2048,n=4

``--resummarize FOLDER`` reduces the raw traces a run kept (``FOLDER/torch``) again, on any
machine, after a change to :func:`summarize_trace`.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import csv
import gzip
import itertools
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

STEP_MARK = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
"""The CPU annotation vLLM 0.25's worker opens around each step: prefill requests (tokens) and
decode requests (tokens) of the batch."""
COMPOSITION = ("prefill_reqs", "prefill_tokens", "decode_reqs", "decode_tokens")

KERNEL_CLASSES = (
    ("comm", r"nccl|all_?reduce|cross_device_reduce|all_?gather|reduce_?scatter"),
    ("quant", r"quant|scaled_fp8|per_token_group"),
    ("attention", r"flash|fmha|attn|attention|paged|reshape_and_cache|merge_attn"),
    ("gemm", r"gemm|cutlass|sm90_xmma|nvjet|cublas|wgmma|matmul|splitk|marlin"),
    ("norm", r"rms_?norm|layer_?norm"),
    ("rope", r"rotary|rope"),
    ("activation", r"silu|act_and_mul|gelu"),
    ("moe", r"moe|topk|expert"),
    ("sampling", r"sampl|softmax|argmax|top_k|top_p|gumbel|exponential|logit"),
    ("inductor", r"^triton_"),
    ("copy", r"memcpy|memset|copy|cat|index|gather|scatter|fill"),
)
"""First matching pattern (case-insensitive) names a kernel's class; anything else is ``other``."""
_CLASS_RE = [(name, re.compile(pat, re.I)) for name, pat in KERNEL_CLASSES]
CLASS_NAMES = (*(name for name, _ in KERNEL_CLASSES), "other")


def kernel_class(name: str) -> str:
    """The class of a kernel name (:data:`KERNEL_CLASSES`)."""
    for cls, pattern in _CLASS_RE:
        if pattern.search(name):
            return cls
    return "other"


def parse_scenario(text: str) -> dict[str, Any]:
    """``kind:key=value,...`` into a dict; ValueError names what is accepted."""
    kinds = {"decode": {"seqs", "in"}, "prefill": {"in", "n"}, "burst": {"in", "n"},
             "chunked": {"in", "n", "decodes", "din"},
             "graphless": {"in", "n", "decodes", "din"}, "prefixed": {"in", "prefix", "n"},
             "shared": {"seqs", "in", "prefix", "groups"}}
    optional = {"chunked": {"prefix", "groups"}}
    kind, _, rest = text.partition(":")
    if kind not in kinds:
        raise ValueError(f"scenario {text!r}: kind must be one of {', '.join(kinds)}")
    accepted = kinds[kind] | optional.get(kind, set())
    out: dict[str, Any] = {"kind": kind, "label": text}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        least = 0 if (kind, key) == ("graphless", "decodes") else 1
        if key not in accepted or not value.isdigit() or int(value) < least:
            raise ValueError(f"scenario {text!r}: {item!r}; {kind} takes {', '.join(sorted(accepted))} "
                             f"as positive integers" + (" (decodes may be 0)" if kind == "graphless" else ""))
        out[key] = int(value)
    missing = kinds[kind] - out.keys()
    if missing:
        raise ValueError(f"scenario {text!r}: missing {', '.join(sorted(missing))}")
    if len(optional.get(kind, set()) & out.keys()) == 1:
        raise ValueError(f"scenario {text!r}: {kind} takes prefix and groups together or neither")
    return out


# ------------------------------------------------------------------------------ trace reduction


LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
"""Profiler categories of the CPU calls that launch kernels: the runtime's (``cudaLaunchKernel``,
``cudaGraphLaunch``) and the driver's (``cuLaunchKernel``, ``cuLaunchKernelEx``: Triton's kernels
and cuBLASLt's in a step run without CUDA graphs; before the driver's were counted, such a step
kept its attention kernels only)."""


def _events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]


def summarize_trace(trace: dict[str, Any], label: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Reduce a torch-profiler chrome trace to (step rows, kernel rows).

    Steps start at each CPU :data:`STEP_MARK` annotation, which names the batch's composition
    (:data:`COMPOSITION` columns); a GPU kernel belongs to the step in
    which the CPU call that launched it (its runtime or driver event, :data:`LAUNCH_CATEGORIES`,
    matched by ``correlation``; a ``cudaGraphLaunch`` for kernels replayed from a CUDA graph) was
    made.  Kernels launched
    before the first mark are dropped.  Per step: ``gpu_busy_us`` (sum of kernel durations),
    ``span_us`` (first kernel start to last kernel end), ``cpu_us`` (this mark to the next),
    ``kernels`` and one ``<class>_us`` column per :data:`CLASS_NAMES`; the last step, whose
    end is not seen, is dropped.  Kernel rows: name, class, count and total microseconds over
    the kept steps.
    """
    events = _events(trace)
    found = sorted((float(e["ts"]), m.groups()) for e in events if e.get("cat") == "user_annotation"
                   and (m := STEP_MARK.match(str(e.get("name", "")))))
    marks = [ts for ts, _ in found]
    launch_ts = {e["args"]["correlation"]: float(e["ts"]) for e in events
                 if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})}
    steps: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") != "kernel":
            continue
        ts = launch_ts.get(e.get("args", {}).get("correlation"))
        i = bisect.bisect_right(marks, ts) - 1 if ts is not None else -1
        if 0 <= i < len(marks) - 1:
            steps[i].append(e)
    rows, per_kernel = [], defaultdict(lambda: [0, 0.0])
    for i in sorted(steps):
        ks = steps[i]
        end = max(float(k["ts"]) + float(k["dur"]) for k in ks)
        batch = dict(zip(COMPOSITION, map(int, found[i][1]), strict=True))
        row: dict[str, Any] = {"scenario": label, "step": i, **batch, "cpu_us": marks[i + 1] - marks[i],
                               "gpu_busy_us": sum(float(k["dur"]) for k in ks), "kernels": len(ks),
                               "span_us": end - min(float(k["ts"]) for k in ks)}
        for cls in CLASS_NAMES:
            row[f"{cls}_us"] = 0.0
        for k in ks:
            row[f"{kernel_class(k['name'])}_us"] += float(k["dur"])
            agg = per_kernel[k["name"]]
            agg[0] += 1
            agg[1] += float(k["dur"])
        rows.append(row)
    kernels = [{"scenario": label, "kernel": name[:160], "class": kernel_class(name), "count": n, "total_us": t}
               for name, (n, t) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1])]
    return rows, kernels


def write_csv(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    rows = list(rows)
    if not rows:
        return
    new = not path.exists()
    with path.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        if new:
            w.writeheader()
        w.writerows(rows)


# ------------------------------------------------------------------------------ the engine side


class Client:
    """Sends requests to an ``AsyncLLM`` and keeps each one's token times.  Prompts are the
    measurement driver's (random ids from a stream keyed by the request id, so no two share a
    cached prefix) and so are the sampling parameters (exactly ``out`` tokens, as deltas)."""

    def __init__(self, engine: Any, vocab: int) -> None:
        self.engine, self.vocab = engine, vocab
        self.times: dict[str, list[float]] = {}
        self.sent: dict[str, float] = {}

    def own_ids(self, key: str, length: int) -> list[int]:
        """``length`` random token ids from the stream keyed by ``key`` (one key, one sequence)."""
        from latsim.measure.loadgen import prompt_stream

        return prompt_stream(0, key).integers(10, self.vocab, length).tolist()  # type: ignore[no-any-return]

    async def one(self, rid: str, prompt: int, out: int, prefix: list[int] | None = None) -> None:
        """Send ``prefix`` (token ids; none by default) and ``prompt`` ids of the request's own."""
        from latsim.measure.vllm_driver import vllm_sampling_params

        ids = (prefix or []) + self.own_ids(rid, prompt)
        self.times[rid], self.sent[rid] = [], time.perf_counter()
        async for o in self.engine.generate({"prompt_token_ids": ids}, vllm_sampling_params(out), request_id=rid):
            self.times[rid].extend([time.perf_counter()] * max(1, len(o.outputs[0].token_ids)))
            if o.finished:
                break


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def gaps_in(client: Client, rids: list[str], t0: float, t1: float) -> list[float]:
    """Inter-token gaps of ``rids`` whose both ends fall in [t0, t1]."""
    out = []
    for rid in rids:
        ts = [t for t in client.times.get(rid, []) if t0 <= t <= t1]
        out.extend(b - a for a, b in itertools.pairwise(ts))
    return out


async def _until(pred: Any, timeout: float) -> bool:
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        if pred():
            return True
        await asyncio.sleep(0.01)
    return False


async def _profiled(engine: Any, body: Any) -> float:
    t = time.perf_counter()
    await engine.start_profile()
    await body()
    await engine.stop_profile()
    return time.perf_counter() - t


async def start_decoders(client: Client, tag: str, count: int, prompt: int, out: int,
                         prefixes: list[list[int]] | None = None) -> tuple[list[str], list[Any], bool]:
    """``count`` requests decoding in the background, request j after ``prefixes[j % len]`` when
    given: (their ids, their tasks, whether every one had its first token within two minutes);
    returns half a second after that."""
    rids = [f"{tag}-d{j}" for j in range(count)]
    tasks = [asyncio.ensure_future(client.one(r, prompt, out, prefixes[j % len(prefixes)] if prefixes else None))
             for j, r in enumerate(rids)]
    started = await _until(lambda: all(client.times.get(r) for r in rids), 120)
    await asyncio.sleep(0.5)
    return rids, tasks, started


async def stop_decoders(engine: Any, rids: list[str], tasks: list[Any]) -> None:
    await engine.abort(rids)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def warm_prefixes(client: Client, tag: str, sc: dict[str, Any]) -> list[list[int]] | None:
    """The scenario's ``groups`` shared prefixes of ``prefix`` tokens (None without ``groups``),
    each cached by a request of its own before the decoders start."""
    if not sc.get("groups"):
        return None
    prefixes = [client.own_ids(f"{tag}-prefix{g}", sc["prefix"]) for g in range(sc["groups"])]
    for g, ids in enumerate(prefixes):
        await client.one(f"{tag}-warm{g}", 16, 1, ids)
    return prefixes


async def decode(engine: Any, client: Client, sc: dict[str, Any], window_s: float, tag: str) -> dict[str, Any]:
    """S decoders; unprofiled gaps over ``window_s``, then a profiled stretch of the same length.
    A ``shared`` scenario's decoders share ``groups`` prefixes of ``prefix`` tokens (request j the
    prefix j mod groups, each cached by a request of its own first) before their ``in`` tokens:
    their steps read a prefix's KV blocks once for every sequence that shares it."""
    prefixes = await warm_prefixes(client, tag, sc)
    rids, tasks, ok = await start_decoders(client, tag, sc["seqs"], sc["in"], 4000, prefixes)
    t0 = time.perf_counter()
    await asyncio.sleep(window_s)
    gaps = gaps_in(client, rids, t0, time.perf_counter())
    own = sc["in"] + sc.get("prefix", 0)
    context = own + _median([float(len(client.times[r])) for r in rids])
    prof_s = await _profiled(engine, lambda: asyncio.sleep(min(window_s, 1.0)))
    context_end = own + _median([float(len(client.times[r])) for r in rids])
    await stop_decoders(engine, rids, tasks)
    return {"all_started": ok, "itl_median_ms": 1e3 * (_median(gaps) or float("nan")), "gaps": len(gaps),
            "profile_wall_s": prof_s, "context_at_profile": [context, context_end]}


async def serial_prompts(client: Client, tag: str, n: int, length: int,
                         prefix: list[int] | None = None) -> list[float]:
    """TTFTs of ``n`` prompts sent one after another (one output token each), each ``prefix``
    (token ids, when given) and then ``length`` ids of its own."""
    out = []
    for j in range(n):
        rid = f"{tag}-p{j}"
        await client.one(rid, length, 1, prefix)
        out.append(client.times[rid][0] - client.sent[rid])
    return out


async def profiled_prompts(engine: Any, client: Client, sc: dict[str, Any], tag: str,
                           prefix: list[int] | None = None) -> tuple[dict[str, Any], float]:
    """The scenario's ``n`` prompts of ``in`` tokens (after ``prefix`` when given) one after
    another, first without the profiler, then again with it on: both sides' TTFTs (ms) and the
    profiled stretch's wall time, and the ``perf_counter`` at which the unprofiled prompts were done."""
    ttft = await serial_prompts(client, f"{tag}-u", sc["n"], sc["in"], prefix)
    unprofiled_end = time.perf_counter()
    holder: dict[str, list[float]] = {}

    async def body() -> None:
        holder["ttft"] = await serial_prompts(client, f"{tag}-q", sc["n"], sc["in"], prefix)

    prof_s = await _profiled(engine, body)
    return ({"ttft_ms": [1e3 * t for t in ttft], "ttft_profiled_ms": [1e3 * t for t in holder["ttft"]],
             "profile_wall_s": prof_s}, unprofiled_end)


async def prefill(engine: Any, client: Client, sc: dict[str, Any], tag: str) -> dict[str, Any]:
    res, _ = await profiled_prompts(engine, client, sc, tag)
    return res


async def burst_prompts(client: Client, tag: str, n: int, length: int) -> tuple[list[float], float]:
    """TTFTs (s) of ``n`` prompts of ``length`` tokens sent at once (one output token each, in
    the order of their ids, which is the order the engine takes them in), and the seconds from
    sending them to the last one's first token."""
    rids = [f"{tag}-b{j}" for j in range(n)]
    start = time.perf_counter()
    await asyncio.gather(*(client.one(rid, length, 1) for rid in rids))
    return [client.times[r][0] - client.sent[r] for r in rids], time.perf_counter() - start


async def burst(engine: Any, client: Client, sc: dict[str, Any], tag: str) -> dict[str, Any]:
    """The scenario's ``n`` prompts of ``in`` tokens at once, unprofiled, then ``n`` others at once
    with the profiler on (their own ids: no cached prefix from the first burst)."""
    ttft, wall = await burst_prompts(client, f"{tag}-u", sc["n"], sc["in"])
    holder: dict[str, tuple[list[float], float]] = {}

    async def body() -> None:
        holder["burst"] = await burst_prompts(client, f"{tag}-q", sc["n"], sc["in"])

    prof_s = await _profiled(engine, body)
    ttft_q, wall_q = holder["burst"]
    return {"ttft_ms": [1e3 * t for t in ttft], "burst_ms": 1e3 * wall,
            "ttft_profiled_ms": [1e3 * t for t in ttft_q], "burst_profiled_ms": 1e3 * wall_q,
            "profile_wall_s": prof_s}


async def prefixed(engine: Any, client: Client, sc: dict[str, Any], tag: str) -> dict[str, Any]:
    """Prefix-cache hits: one request of the scenario's shared ``prefix`` tokens (and ``in`` of its
    own) leaves the prefix's full blocks cached; then ``n`` prompts of that prefix and ``in``
    tokens of their own one after another, unprofiled and then profiled (:func:`profiled_prompts`):
    each finds the prefix's full blocks cached and computes the rest."""
    ids = client.own_ids(f"{tag}-prefix", sc["prefix"])
    await client.one(f"{tag}-warm", sc["in"], 1, ids)
    res, _ = await profiled_prompts(engine, client, sc, tag, ids)
    return res


async def chunked(engine: Any, client: Client, sc: dict[str, Any], tag: str) -> dict[str, Any]:
    """Long prompts beside ``decodes`` decoders; the decoders' gaps before (quiet) and while the
    unprofiled prompts ran (busy: the largest 16 gaps per prompt), and every engine step's time
    while they ran (``decode_step_gaps_ms``, :func:`step_gaps`: a prompt's steps are the longest)."""
    prefixes = await warm_prefixes(client, tag, sc)
    rids, tasks, _ = await start_decoders(client, tag, sc["decodes"], sc["din"], 6000, prefixes)
    t0 = time.perf_counter()
    quiet = gaps_in(client, rids, t0 - 0.5, t0)
    res, unprofiled_end = await profiled_prompts(engine, client, sc, tag)
    busy = gaps_in(client, rids, t0, unprofiled_end)
    steps = step_gaps(client, rids, t0, unprofiled_end)
    await stop_decoders(engine, rids, tasks)
    return {**res, "decode_itl_quiet_ms": 1e3 * (_median(quiet) or float("nan")),
            "decode_itl_busy_ms": sorted(1e3 * g for g in busy)[-16 * sc["n"]:] if busy else [],
            "decode_step_gaps_ms": [1e3 * g for g in steps]}


def step_gaps(client: Client, rids: list[str], t0: float, t1: float) -> list[float]:
    """The time between successive emissions of the decoders (:func:`emissions`) within [t0, t1],
    in order: one engine step each while every decoder emits a token per step."""
    starts = emissions(client, rids, t0, t1)
    return [b - a for a, b in itertools.pairwise(starts)]


EMISSION_SPLIT_S = 5e-4
"""Tokens of one engine step reach the client within about 0.1 ms of each other: a larger gap
in the decoders' merged token times starts the next step's emission."""


def emissions(client: Client, rids: list[str], t0: float, t1: float) -> list[float]:
    """Start times of the decoders' emissions (one per engine step) within [t0, t1]."""
    ts = sorted(t for rid in rids for t in client.times.get(rid, []) if t0 <= t <= t1)
    return [b for a, b in zip([-1.0, *ts], ts, strict=False) if b - a > EMISSION_SPLIT_S]


async def graphless(client: Client, sc: dict[str, Any], tag: str) -> dict[str, Any]:
    """Unprofiled: ``decodes`` decoders (none when 0), then ``n`` prompts of ``in`` tokens one at
    a time, each sent after a random pause (0.05-0.10 s, seeded by the tag) so that it arrives
    at any phase of a decode step.  Per prompt: the TTFT and the decoders' emissions from 50 ms
    before it was sent to 50 ms after its first token, in ms from when it was sent."""
    import random

    rng = random.Random(tag)
    rids, tasks, ok = await start_decoders(client, tag, sc["decodes"], sc["din"], 3000) if sc["decodes"] \
        else ([], [], True)
    prompts = []
    for j in range(sc["n"]):
        await asyncio.sleep(0.05 + 0.05 * rng.random())
        rid = f"{tag}-g{j}"
        await client.one(rid, sc["in"], 1)
        sent, first = client.sent[rid], client.times[rid][0]
        await asyncio.sleep(0.05)
        ems = emissions(client, rids, sent - 0.05, first + 0.05)
        prompts.append({"ttft_ms": 1e3 * (first - sent), "sent_s": round(sent, 6),
                        "emissions_ms": [round(1e3 * (e - sent), 3) for e in ems]})
    quiet = gaps_in(client, rids, client.sent[f"{tag}-g0"] - 0.5, client.sent[f"{tag}-g0"]) if rids else []
    if rids:
        await stop_decoders(client.engine, rids, tasks)
    return {"all_started": ok, "decode_itl_quiet_ms": 1e3 * (_median(quiet) or float("nan")), "prompts": prompts}


def newest_trace(folder: Path, seen: set[Path]) -> Path | None:
    found = [p for p in folder.rglob("*.json*") if p not in seen and "trace" in p.name]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def load_trace(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def resummarize(folder: Path) -> int:
    """Write ``folder``'s ``steps.csv`` and ``kernels.csv`` again from the raw traces it kept
    (``torch/``, named per scenario in ``timings.json``), in scenario order: for a run summarised
    by an earlier :func:`summarize_trace`.  Returns the number of scenarios summarised; the CSVs
    are written whole to temporary files and moved into place."""
    meta = json.loads((folder / "timings.json").read_text())
    tmp = {name: folder / f".{name}.tmp" for name in ("steps.csv", "kernels.csv")}
    for path in tmp.values():
        path.unlink(missing_ok=True)
    done = 0
    for res in meta.get("scenarios", []):
        raw = folder / "torch" / str(res.get("trace", ""))
        if not res.get("trace") or not raw.is_file():
            continue
        steps, kernels = summarize_trace(load_trace(raw), res["scenario"]["label"])
        write_csv(tmp["steps.csv"], steps)
        write_csv(tmp["kernels.csv"], kernels)
        done += 1
    for name, path in tmp.items():
        if path.exists():
            path.replace(folder / name)
    return done


async def scenarios(args: argparse.Namespace, engine: Any, client: Client, out: Path, prof_dir: Path,
                    seen: set[Path], meta: dict[str, Any]) -> None:
    """Run ``args.scenario`` one after another, each result appended to ``meta["scenarios"]``
    and ``timings.json`` rewritten after each."""
    from latsim.measure.hostprobe import host_speed

    for k, sc in enumerate(args.scenario):
        tag = f"s{k}"
        probed = {"host_speed_before": host_speed(1.0)}
        started_at = datetime.now(timezone.utc).isoformat()  # cuts an nvidia-smi series (power_summary.py)
        t = time.perf_counter()
        if sc["kind"] in ("decode", "shared"):
            res = await decode(engine, client, sc, args.window, tag)
        elif sc["kind"] == "prefill":
            res = await prefill(engine, client, sc, tag)
        elif sc["kind"] == "burst":
            res = await burst(engine, client, sc, tag)
        elif sc["kind"] == "prefixed":
            res = await prefixed(engine, client, sc, tag)
        elif sc["kind"] == "graphless":
            res = await graphless(client, sc, tag)
        else:
            res = await chunked(engine, client, sc, tag)
        res.update(scenario=sc, started_at=started_at, seconds=time.perf_counter() - t, **probed,
                   host_speed_after=host_speed(1.0))
        path = newest_trace(prof_dir, seen) if sc["kind"] != "graphless" else None
        if path is not None:
            seen.add(path)
            steps, kernels = summarize_trace(load_trace(path), sc["label"])
            write_csv(out / "steps.csv", steps)
            write_csv(out / "kernels.csv", kernels)
            res.update(trace=path.name, trace_bytes=path.stat().st_size, steps=len(steps))
        meta["scenarios"].append(res)
        print(json.dumps({k2: v for k2, v in res.items() if k2 not in ("scenario",)}, default=str)[:600], flush=True)
        (out / "timings.json").write_text(json.dumps(meta, indent=1, default=str))


async def run(args: argparse.Namespace) -> None:
    from vllm.config import ProfilerConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    from latsim.engines.vllm.host_terms import reference_probe_s
    from latsim.measure.hostprobe import HostProbe, host_speed
    out, prof_dir = Path(args.out), Path(args.out).resolve() / "torch"
    out.mkdir(parents=True, exist_ok=True)
    if args.config_dir:  # kept so that the run can be priced later (scripts/graphless_steps.py)
        (out / "config.json").write_text((Path(args.config_dir) / "config.json").read_text())
    import torch

    meta: dict[str, Any] = {"argv": sys.argv, "gpu_name": torch.cuda.get_device_name(0),
                            "host_speed_before": host_speed(3.0),
                            "weights": "checkpoint-like" if args.checkpoint_weights else "dummy",
                            # e.g. VLLM_DISABLE_SHARED_EXPERTS_STREAM=1 (scripts/shared_overlap.py)
                            "vllm_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("VLLM_")}}
    if args.checkpoint_weights:
        from checkpoint_weights import install  # scripts/ is on the path when run by path

        install(Path(tempfile.mkdtemp()) / "plugin")
    extra = {k: json.loads(v) for k, v in (a.split("=", 1) for a in args.engine_arg)}
    prof = ProfilerConfig(profiler="torch", torch_profiler_dir=str(prof_dir), torch_profiler_with_stack=False,
                          ignore_frontend=True, torch_profiler_dump_cuda_time_total=False)
    eargs = AsyncEngineArgs(model=config_dir(args), load_format="dummy", skip_tokenizer_init=True, seed=0,
                            profiler_config=prof, **extra)
    t = time.perf_counter()
    engine = AsyncLLM.from_engine_args(eargs, usage_context=UsageContext.OPENAI_API_SERVER)
    meta["engine_start_s"] = time.perf_counter() - t
    client = Client(engine, engine.vllm_config.model_config.get_vocab_size())
    await serial_prompts(client, "warm", 8, 256)
    await decode(engine, client, {"seqs": 32, "in": 128}, 0.5, "warmd")
    seen: set[Path] = set(prof_dir.rglob("*")) if prof_dir.exists() else set()
    meta["scenarios"] = []
    with HostProbe() as series:
        # the sampler's clock starts at its own start; its first row has just been written (entering
        # waits for it, polling every 10 ms), so this places its rows on this process's clock within
        # about 10 ms (CLOCK_MONOTONIC is one clock for every process)
        meta["host_series_t0_s"] = time.perf_counter() - series.rows_so_far()[0][0]
        await scenarios(args, engine, client, out, prof_dir, seen, meta)
    meta["host_series"] = {"columns": ["t_s", "probe_s"], "reference_s": reference_probe_s(),
                           "rows": [[r[0], r[1]] for r in series.rows]}
    meta["host_speed_after"] = host_speed(3.0)
    meta["engine_config"] = {"max_num_seqs": engine.vllm_config.scheduler_config.max_num_seqs,
                             "max_num_batched_tokens": engine.vllm_config.scheduler_config.max_num_batched_tokens,
                             "num_gpu_blocks": engine.vllm_config.cache_config.num_gpu_blocks,
                             "cudagraph_capture_sizes": engine.vllm_config.compilation_config.cudagraph_capture_sizes,
                             "tp": engine.vllm_config.parallel_config.tensor_parallel_size,
                             "executor": engine.vllm_config.parallel_config.distributed_executor_backend}
    (out / "timings.json").write_text(json.dumps(meta, indent=1, default=str))
    engine.shutdown()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--resummarize", type=Path, metavar="FOLDER",
                   help="only reduce the raw traces a run kept in FOLDER/torch again (no GPU, no vLLM)")
    p.add_argument("--config-dir", help="a directory holding an HF config.json")
    p.add_argument("--model", help="a catalog model (latsim/data/catalog/models/NAME.json) instead")
    p.add_argument("--out")
    p.add_argument("--scenario", action="append", type=parse_scenario)
    p.add_argument("--window", type=float, default=2.0, help="seconds of unprofiled decode timing")
    p.add_argument("--engine-arg", action="append", default=[], help="KEY=JSON, any AsyncEngineArgs")
    p.add_argument("--checkpoint-weights", action="store_true",
                   help="fill packed 4-bit weights, zero points and FP8 weights like a real checkpoint "
                        "(scripts/checkpoint_weights.py) instead of vLLM's dummy fill (zeros: no power drawn)")
    args = p.parse_args(argv)
    if args.resummarize is not None:
        if not (args.resummarize / "timings.json").is_file():
            p.error(f"--resummarize {args.resummarize}: no timings.json there (a device_trace.py --out folder)")
        return args
    if args.out is None or not args.scenario:
        p.error("--out and at least one --scenario are required (or --resummarize FOLDER)")
    if (args.config_dir is None) == (args.model is None):
        p.error("give exactly one of --config-dir and --model")
    return args


def config_dir(args: argparse.Namespace) -> str:
    """The directory holding the engine's config.json (a catalog model's is written to a temp dir)."""
    if args.config_dir:
        return str(args.config_dir)
    src = Path(__file__).resolve().parents[1] / "latsim" / "data" / "catalog" / "models" / f"{args.model}.json"
    if not src.is_file():
        raise SystemExit(f"--model {args.model!r}: no {src}")
    tmp = Path(tempfile.mkdtemp())
    (tmp / "config.json").write_text(src.read_text())
    return str(tmp)


if __name__ == "__main__":
    parsed = parse_args()
    if parsed.resummarize is not None:
        print(f"{resummarize(parsed.resummarize)} scenarios summarised in {parsed.resummarize}")
    else:
        asyncio.run(run(parsed))
