"""Run request streams through vLLM's own scheduler and print the step records as JSON.

The reference half of the differential tests' bridge (the other half is
``latsim/oracle/differential.py``). It runs under the python of the vLLM reference
environment (``.ci/vllm-ref.sh``), which has vLLM and torch but none of latsim's own
dependencies, so it imports only the pure-Python modules ``latsim.oracle.steprecord`` and
``latsim.oracle.vllm_exact``; the repository root is put on ``sys.path``.

Input: a JSON list of cases (a file argument, or standard input), each
``{"stream": [...], "config": {...}}``. A stream entry is a ``StreamRequest`` as a list
``[request_id, arrival_step, prompt_tokens, output_tokens, prefix_group, prefix_tokens]``
(the last two optional) or as an object with those keys; ``config`` holds the keyword
arguments of ``run_vllm_scheduler`` (``async_scheduling: true`` picks the asynchronous
scheduler). Output, on standard output: ``{"results": [...], "seconds": s}`` with, per case in
input order, ``{"records": [record, ...], "seconds": s}`` (``s``: the time
``run_vllm_scheduler`` took) or ``{"error": "ExceptionType: message"}``. A record is an
object with ``step`` and ``scheduled`` (``[[request_id, tokens], ...]``) and, when not empty,
``new``, ``preempted``, ``finished``, ``rejected`` and ``cached_tokens``.

``--serve`` answers one JSON list of cases per input line with one JSON result line, until
standard input closes (one vLLM import for many batches). ``--jobs N`` spreads the cases of a
batch over N forked workers (default: ``LATSIM_DIFF_JOBS``, else the number of CPUs, at most
4). Everything vLLM logs goes to standard error.

    /work/vllm-ref/bin/python scripts/run_differential.py cases.json > records.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_REPO_ROOT = Path(__file__).resolve().parents[1]
_STREAM_KEYS = ("request_id", "arrival_step", "prompt_tokens", "output_tokens", "prefix_group", "prefix_tokens")


def _stream(entries: list[Any]) -> list[Any]:
    from latsim.oracle.steprecord import StreamRequest

    out = []
    for e in entries:
        fields = dict(zip(_STREAM_KEYS, e, strict=False)) if isinstance(e, list) else dict(e)
        out.append(StreamRequest(**fields))
    return out


def record_to_json(rec: Any) -> dict[str, Any]:
    """A ``StepRecord`` as a JSON object; empty fields are left out."""
    out: dict[str, Any] = {"step": rec.step, "scheduled": [list(p) for p in rec.scheduled]}
    for name in ("new", "preempted", "finished", "rejected"):
        value = getattr(rec, name)
        if value:
            out[name] = list(value)
    if rec.cached_tokens:
        out["cached_tokens"] = dict(rec.cached_tokens)
    return out


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """One case through ``run_vllm_scheduler``: its records, or the error it raised."""
    from latsim.oracle.vllm_exact import run_vllm_scheduler

    stream = _stream(case["stream"])
    start = time.perf_counter()
    try:
        records = run_vllm_scheduler(stream, **case.get("config", {}))
    except (ValueError, TypeError, RuntimeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    seconds = time.perf_counter() - start
    return {"records": [record_to_json(r) for r in records], "seconds": round(seconds, 6)}


def run_batch(cases: list[dict[str, Any]], jobs: int) -> dict[str, Any]:
    start = time.perf_counter()
    if jobs > 1 and len(cases) > 1:
        import multiprocessing

        # Forked after vLLM was imported (``_warm_up``): the workers pay no import.
        with multiprocessing.get_context("fork").Pool(min(jobs, len(cases))) as pool:
            results = pool.map(run_case, cases, chunksize=1)
    else:
        results = [run_case(c) for c in cases]
    return {"results": results, "seconds": round(time.perf_counter() - start, 3)}


def _warm_up() -> None:
    """Import vLLM and build one scheduler, so forked workers start warm."""
    from latsim.oracle.steprecord import StreamRequest
    from latsim.oracle.vllm_exact import run_vllm_scheduler

    run_vllm_scheduler(
        [StreamRequest("warm", 0, 1, 1)], num_gpu_blocks=4, max_num_seqs=1, max_num_batched_tokens=16, max_model_len=16
    )


def _default_jobs() -> int:
    env = os.environ.get("LATSIM_DIFF_JOBS")
    if env:
        return max(1, int(env))
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="?", help="JSON file of cases (default: standard input)")
    parser.add_argument("--serve", action="store_true", help="one JSON batch per input line, one result line each")
    parser.add_argument("--jobs", type=int, default=None, help="forked workers per batch")
    args = parser.parse_args(argv)
    jobs = args.jobs or _default_jobs()

    # Results go to the real standard output; anything printed or logged while running goes to
    # standard error, so the JSON stays clean.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if str(_REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(_REPO_ROOT))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    _warm_up()

    if args.serve:
        for line in sys.stdin:
            if line.strip():
                out.write(json.dumps(run_batch(json.loads(line), jobs), separators=(",", ":")) + "\n")
                out.flush()
        return 0
    text = Path(args.cases).read_text() if args.cases else sys.stdin.read()
    out.write(json.dumps(run_batch(json.loads(text), jobs), separators=(",", ":")) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
