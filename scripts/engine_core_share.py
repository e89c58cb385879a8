"""Time the engine-core process's part of a vLLM 0.25.1 step on this CPU, with vLLM's own code.

    py=$(bash .ci/vllm-ref.sh)   # vLLM 0.25.1 without its CUDA parts (any python with it will do)
    $py scripts/engine_core_share.py --out data/host/cpu/engine-core-share.json

The host time of a step (``step_s + seq_s x sequences`` in ``latsim/data/engines/vllm/host.yaml``)
is fitted on a uniprocess engine, where one thread schedules, prepares and launches the model's
inputs, and takes in the outputs.  With the multiprocess executor (vLLM's default above one
GPU) the scheduling and the taking-in stay in the engine-core process while a worker prepares
and launches; which part of the fitted host time is which is not in any live run.  The engine
core's part is plain Python that runs without a GPU, so this script times it here, per step of
``N`` decoding sequences (after :data:`WARMUP_STEPS` steps, median of ``--steps``):

- ``schedule``: ``AsyncScheduler.schedule()`` (the engine core, on the launch's path: a step is
  launched once it is scheduled);
- ``update``: ``update_from_output()`` with one sampled token per sequence (the engine core,
  after the step's launch, on neither executor's launch path);
- ``encode``: the engine core's outputs serialized for the front end (``MsgpackEncoder``; its
  output thread);
- ``send`` / ``receive``: the multiprocess executor's message to its workers (the scheduler
  output, pickled as ``MessageQueue.enqueue`` does, and unpickled as a worker does): extra host
  work on a worker's launch path that the uniprocess engine does not have.

Then the same for a step in which one ``--prompt``-token request joins the ``N`` decodes
(``prompt_schedule``, ``prompt_send``, ``prompt_receive``).  Beside the rows: the host probe's
workload timed here before each count (:func:`latsim.measure.hostprobe.baseline_s`, median
of 100; ``probe_ms`` of each row), so the times can be put at the host of ``host.yaml``
(``host_reference_probe_s``): a time here times reference probe / the rows' median probe.
That conversion assumes the scheduler's Python and the probe's loop speed up alike from one CPU
to another.  Each part's least-squares line
``a + b x N`` over the rows, here and at the reference host, goes into the file's ``lines``.

Writes one JSON file atomically, with the command, commit and date; the timings are this CPU's
and change from run to run by a few per cent (``docs/step-time-model.md`` reads them).
"""

from __future__ import annotations

import argparse
import json
import pickle
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run by path under vLLM's reference python, latsim not installed
    sys.path.insert(0, str(REPO))

from latsim.atomic import atomic_write_text  # noqa: E402
from latsim.engines.vllm.host_terms import reference_probe_s  # noqa: E402
from latsim.measure.hostprobe import DEFAULT_WORK, baseline_s  # noqa: E402
from latsim.oracle.vllm_build import import_vllm  # noqa: E402
from latsim.provenance import record  # noqa: E402

FORMAT = "latsim-engine-core-share/1"
DECODE_PARTS = ("schedule", "update", "encode", "send", "receive")
PROMPT_PARTS = ("prompt_schedule", "prompt_send", "prompt_receive")
WARMUP_STEPS = 4
VOCAB = 32000
ENGINE = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "max_model_len": 8192,
          "enable_chunked_prefill": True, "long_prefill_token_threshold": 0,
          "scheduler_reserve_full_isl": True, "watermark": 0.01, "async_scheduling": True,
          "block_size": 16, "enable_prefix_caching": True, "num_gpu_blocks": 200_000,
          "num_kv_heads": 8, "head_dim": 64}
"""vLLM 0.25.1's defaults for Llama-3.2-1B on one H200 (the engine of the host sweeps) with a
KV pool large enough that nothing is ever preempted."""


def positive_ints(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; ArgumentTypeError naming the text unless every item is an
    integer >= 1."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers >= 1, e.g. 1,8,64")
    return values


class Engine:
    """vLLM's asynchronous scheduler with ``seqs`` requests decoding, stepped as the engine core
    steps it (schedule step k+1, then take in step k's outputs), each part timed."""

    def __init__(self, seqs: int, seed: int = 0) -> None:
        from vllm.v1.serial_utils import MsgpackEncoder

        from latsim.oracle.vllm_build import block_hasher, build_vllm_scheduler

        self.scheduler = build_vllm_scheduler(**ENGINE)
        self.hasher = block_hasher(self.scheduler)
        self.encoder = MsgpackEncoder()
        self.rng = random.Random(seed)
        self.in_flight: Any = None
        self.added = 0
        for _ in range(seqs):
            self.add(32)

    def add(self, tokens: int) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        never = 1 << 30  # the requests never finish: every step decodes them all
        params = SamplingParams(max_tokens=never, min_tokens=never, ignore_eos=True)
        ids = [self.rng.randrange(1, VOCAB) for _ in range(tokens)]
        self.scheduler.add_request(Request(request_id=str(self.added), prompt_token_ids=ids, sampling_params=params,
                                           pooling_params=None, arrival_time=0.0, block_hasher=self.hasher))
        self.added += 1

    def step(self, times: dict[str, list[float]], prefix: str = "") -> None:
        """One engine-core iteration; appends each part's seconds to ``times`` (keys prefixed
        ``prefix``; the take-in parts only without one)."""
        timed = _timer(times, prefix)
        out = timed("schedule", self.scheduler.schedule)
        # vLLM's own wire format between its processes, timed in memory (nothing is read from disk)
        message = timed("send", lambda: pickle.dumps(("execute_model", (out,), {}, None),
                                                     protocol=pickle.HIGHEST_PROTOCOL))
        timed("receive", lambda: pickle.loads(message))
        done, self.in_flight = self.in_flight, out
        if done is None:
            return
        runner_output = self.sampled(done)
        take_in = _untimed if prefix else timed
        outputs = take_in("update", lambda: self.scheduler.update_from_output(done, runner_output))
        take_in("encode", lambda: [self.encoder.encode(o) for o in outputs.values()])

    def sampled(self, out: Any) -> Any:
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(out.num_scheduled_tokens)
        requests = self.scheduler.requests
        sampling = [[] if requests[r].is_prefill_chunk else [self.rng.randrange(1, VOCAB)] for r in ids]
        return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                 sampled_token_ids=sampling)


def _timer(times: dict[str, list[float]], prefix: str) -> Callable[[str, Callable[[], Any]], Any]:
    def timed(name: str, call: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        value = call()
        times.setdefault(prefix + name, []).append(time.perf_counter() - start)
        return value
    return timed


def _untimed(name: str, call: Callable[[], Any]) -> Any:
    del name
    return call()


def measure(seqs: int, steps: int, prompt: int) -> dict[str, Any]:
    """Median milliseconds of each part of :data:`DECODE_PARTS` and :data:`PROMPT_PARTS` with
    ``seqs`` sequences decoding (``steps`` steps each, after :data:`WARMUP_STEPS`)."""
    engine = Engine(seqs)
    for _ in range(WARMUP_STEPS):
        engine.step({})
    decode: dict[str, list[float]] = {}
    for _ in range(steps):
        engine.step(decode)
    joined: dict[str, list[float]] = {}
    for _ in range(max(1, steps // 4)):
        engine.add(prompt)
        engine.step(joined, prefix="prompt_")
        engine.step({})  # the prompt's step taken in; it decodes from now on
    row: dict[str, Any] = {"seqs": seqs, "steps": steps}
    row.update({k: statistics.median(v) * 1e3 for k, v in {**decode, **joined}.items()})
    return row


def lines(rows: Sequence[dict[str, Any]], to_reference: float) -> dict[str, dict[str, float]]:
    """Per part, the least-squares ``a + b x seqs`` through ``rows`` (milliseconds, microseconds
    per sequence), here and times ``to_reference``."""
    seqs = np.array([r["seqs"] for r in rows], dtype=float)
    out = {}
    for part in (*DECODE_PARTS, *PROMPT_PARTS):
        ms = np.array([r[part] for r in rows], dtype=float)
        b, a = np.polyfit(seqs, ms, 1) if len(rows) > 1 else (0.0, float(ms[0]))
        out[part] = {"a_ms": float(a), "b_us": float(b) * 1e3,
                     "a_ms_reference": float(a) * to_reference, "b_us_reference": float(b) * 1e3 * to_reference}
    return out


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(seqs: Sequence[int], steps: int, prompt: int, out: Path) -> dict[str, Any]:
    """Measure every count in ``seqs``, write the file, return its content."""
    vllm = import_vllm()
    baseline_s(DEFAULT_WORK, repeats=20)  # warm the interpreter's path through the workload
    rows = []
    for n in seqs:
        probe = baseline_s(DEFAULT_WORK, repeats=100)
        rows.append({**measure(n, steps, prompt), "probe_ms": probe * 1e3})
        print(" ".join([f"{n:5d} seqs"] + [f"{k} {rows[-1][k]:.3f}" for k in (*DECODE_PARTS, *PROMPT_PARTS)]) + " ms",
              flush=True)
    here = float(np.median([r["probe_ms"] for r in rows])) / 1e3
    reference = reference_probe_s()
    content = {"format": FORMAT, "cpu": cpu_name(), "python": platform.python_version(), "vllm": vllm.__version__,
               "engine": ENGINE, "probe": {"work": DEFAULT_WORK, "here_s": here, "reference_s": reference,
                                           "to_reference": reference / here},
               "rows": rows, "lines": lines(rows, reference / here)}
    content["provenance"] = record({"seqs": list(seqs), "steps": steps, "prompt": prompt}, {})
    atomic_write_text(out, json.dumps(content, indent=1) + "\n")
    return content


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    ap.add_argument("--seqs", type=positive_ints, default=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
                    help="decoding sequences per measured step, comma-separated (default 1,2,...,512)")
    ap.add_argument("--steps", type=int, default=60, help="timed steps per count (default 60)")
    ap.add_argument("--prompt", type=int, default=512, help="tokens of the prompt that joins (default 512)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.prompt < 1:
        ap.error(f"--steps {args.steps} and --prompt {args.prompt}: both must be integers >= 1")
    try:
        import_vllm()
    except ImportError:
        ap.error("needs vLLM 0.25.1 importable (CPU is enough): run under the python `bash .ci/vllm-ref.sh` prints")
    content = run(args.seqs, args.steps, args.prompt, args.out)
    for part, line in content["lines"].items():
        print(f"{part:16s} {line['a_ms']:.4f} ms + {line['b_us']:.3f} us/seq here;  at the reference host "
              f"{line['a_ms_reference']:.4f} ms + {line['b_us_reference']:.3f} us/seq")
    return 0


if __name__ == "__main__":
    sys.exit(main())
