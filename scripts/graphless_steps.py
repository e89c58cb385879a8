"""Graph-less steps of a live engine against the cost model, from ``device_trace.py graphless`` runs.

    python scripts/graphless_steps.py data/traces/h200/graphless/llama-3.1-8b [...] [--csv OUT]

Each ``graphless`` scenario sent prompts of ``in`` tokens one at a time beside ``decodes``
decoders (unprofiled).  Under asynchronous scheduling the step that carries a prompt is decided
once the step before the one running has sent its outputs (emission ``e0``); when that prompt's
step runs without CUDA graphs, its launch holds back the running step's outputs until the launch
ends (emission ``e1``); its own outputs carry the prompt's first token (``first``).  Per scenario
this prints the medians of the launch ``e1 - e0``, the tail ``first - e1``, the whole cycle
``first - e0`` and the TTFT, and what the cost model gives for the same step at the scenario's
host speed (the mean of the probes bracketing it, else of the run's before and after; the
model: the catalog model the run names, or the
``config.json`` beside the timings of a ``--config-dir`` run): the step's GPU time with and without the
per-layer term of a graph-less step (``eager_layer_s``), its launch, and the cycle each way,
``max(D + gpu, launch + launch_tail_s)`` with ``D`` the measured decode step (the step running
when the prompt's step was decided).  Prompts without decoders give only the TTFT; its model
counterpart is ``frontend + max(gpu, launch + tail)`` for a graph-less step and ``frontend +
host + gpu`` for a graph step.  ``--csv`` writes one row per scenario (atomically).

With the model in a worker process (vLLM's multiprocess executor: ``engine_config.executor``,
else the run's ``--engine-arg distributed_executor_backend=...``, else vLLM's default for its TP)
nothing is held: ``e1`` is the running step's own emission, so no launch or tail is read (NaN)
and the cycle ``first - e0`` is the one measure.  Such a run also gets the model's cycle with the
launch less the step's host work (``model_cycle_worker_ms``): in a worker, scheduling and taking in
outputs run in the engine-core process, and how much of that host work a worker's launch still
waits for is the open question this measures (``docs/step-time-model.md``, "What a worker's
launch contains").
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from latsim.atomic import atomic_write_text
from latsim.catalog.lookup import load_device, load_model
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.host import HostOverlapCostModel
from latsim.deployment import Deployment, EngineConfig
from latsim.engines.vllm.engine import default_executor
from latsim.sim.host_report import _cost_model, host_overlap
from latsim.validate.compare import chosen_executor, profile_cost_model

FIRST_MATCH_MS = 1.5
"""The decoders' emission carrying the prompt's first token starts at most this long before the
client sees it (the client takes a step's tokens one after another: 0.4 ms for 120 of them)."""
LATE_MS = 0.3
"""... and at most this long after it (the two clocks are one; this is rounding)."""
OUTPUT_CHUNK = 128
"""vLLM 0.25.1's front end hands a step's outputs on in chunks of this many requests
(``VLLM_V1_OUTPUT_PROC_CHUNK_SIZE``), letting the client's tasks run between chunks."""
CHUNK_GAP_MS = 4.0
"""A step of more outputs than :data:`OUTPUT_CHUNK` reaches the client in bursts this close at most
(1.5-2.6 ms apart beside 256 decoders); they are merged into one emission (:func:`merged`)."""


def merged(emissions: list[float], within_ms: float) -> list[float]:
    """``emissions`` with each one closer than ``within_ms`` to the one before dropped: a step of
    more than :data:`OUTPUT_CHUNK` outputs reaches the client in bursts a few ms apart, which the
    recorded split (0.5 ms) counts as two emissions."""
    return [e for i, e in enumerate(emissions) if i == 0 or e - emissions[i - 1] >= within_ms]


def cycle_parts(prompt: dict[str, Any], merge_ms: float = 0.0) -> tuple[float, float, float] | None:
    """``(e0, e1, first)`` in ms from the prompt's send, or None when the emissions around its
    first token are not there (no decoders, or the prompt's step was the first one seen); the
    emissions :func:`merged` within ``merge_ms`` first (the first token may then come up to
    ``merge_ms`` after its step's first burst)."""
    first = float(prompt["ttft_ms"])
    ems = merged([float(e) for e in prompt["emissions_ms"]], merge_ms)
    at = [i for i, e in enumerate(ems) if -LATE_MS <= first - e <= FIRST_MATCH_MS + merge_ms]
    if not at or at[-1] < 2:
        return None
    i = at[-1]
    return ems[i - 2], ems[i - 1], first


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def probed_speed(entry: dict[str, Any], default: float) -> float:
    """The mean of ``entry``'s host probes before and after (a run's ``timings.json``, or one
    scenario's result in it), ``default`` when it recorded none."""
    speeds = [entry[k]["host_speed"] for k in ("host_speed_before", "host_speed_after") if entry.get(k)]
    return sum(speeds) / len(speeds) if speeds else default


def run_speed(meta: dict[str, Any]) -> float:
    """The mean of the host probes before and after the run (1.0 when none was recorded)."""
    return probed_speed(meta, 1.0)


def cost_model(meta: dict[str, Any], speed: float, folder: Path | None = None, device: str = "h200",
               profile: Path | None = None) -> HostOverlapCostModel:
    """The engine's default cost model for the run's model on ``device`` (a catalog GPU) at the run's
    tensor parallelism (the engine's recorded ``tp``, else its ``tensor_parallel_size`` argument,
    else 1), the GPU
    priced by the fitted profile folder ``profile`` when given (else the device's shipped one): the
    catalog model the run's argv names, or for a ``--config-dir`` run the ``config.json`` kept
    beside its timings in ``folder``; ValueError when there is neither."""
    argv = meta.get("argv", [])
    if "--model" in argv[:-1]:
        model = load_model(argv[argv.index("--model") + 1])
    elif folder is not None and (folder / "config.json").is_file():
        model = load_model(folder / "config.json")
    else:
        raise ValueError("the run names no catalog model (device_trace.py --model NAME) and has no config.json "
                         "beside its timings (copy the --config-dir's there)")
    max_len = next((int(a.split("=")[1]) for a in argv if a.startswith("max_model_len=")), None)
    ec = meta.get("engine_config", {})
    engine = EngineConfig(max_num_seqs=ec.get("max_num_seqs"), max_num_batched_tokens=ec.get("max_num_batched_tokens"),
                          max_model_len=max_len, num_gpu_blocks=ec.get("num_gpu_blocks"), host_speed=speed)
    tp = int(ec.get("tp") or engine_arg(meta, "tensor_parallel_size") or 1)
    deployment = Deployment(model=model, device=load_device(device), tp=tp, engine=engine)
    return _cost_model(deployment) if profile is None else host_overlap(profile_cost_model(deployment, profile))


def engine_arg(meta: dict[str, Any], key: str) -> Any:
    """The value of ``--engine-arg KEY=JSON`` in the run's argv (``None`` when not given)."""
    argv = meta.get("argv", [])
    for flag, arg in itertools.pairwise(argv):
        if flag == "--engine-arg" and arg.startswith(f"{key}="):
            return json.loads(arg.split("=", 1)[1])
    return None


def run_executor(meta: dict[str, Any]) -> str:
    """Where the run's engine ran the model (see the module note): ``uni`` or ``mp``; ValueError
    for an executor latsim does not model (:func:`latsim.validate.compare.chosen_executor`)."""
    ec = meta.get("engine_config") or {}
    given = chosen_executor(ec.get("executor"), engine_arg(meta, "distributed_executor_backend"))
    return given or default_executor(int(ec.get("tp") or engine_arg(meta, "tensor_parallel_size") or 1))


def scenario_row(cm: HostOverlapCostModel, res: dict[str, Any], executor: str = "uni") -> dict[str, Any]:
    """One scenario's measured medians beside the model's step (decoders' context: 512 + the
    tokens they had made, about a second of decoding), for an engine with ``executor``."""
    sc = res["scenario"]
    decodes, prompt = sc["decodes"], sc["in"]
    quiet = float(res.get("decode_itl_quiet_ms", float("nan")))
    context = sc["din"] + (int(1000.0 / quiet) if decodes else 0)
    shape = BatchShape.from_chunks([(prompt, 0)], [context] * decodes)
    gpu, host = cm.parts(shape)
    eager, launch = cm.eager_s(shape), cm.launch_s(shape)
    graphless = eager > 0.0 or launch > 0.0
    tail = cm.launch_tail_s if launch > 0 else 0.0
    merge = CHUNK_GAP_MS if decodes + 1 > OUTPUT_CHUNK else 0.0
    parts = [p for p in (cycle_parts(x, merge) for x in res["prompts"]) if p is not None]
    held = executor == "uni"
    row: dict[str, Any] = {
        "scenario": sc["label"], "executor": executor, "tokens": shape.num_tokens, "graphless": graphless,
        "n": len(res["prompts"]), "ttft_ms": _median([float(x["ttft_ms"]) for x in res["prompts"]]),
        "decode_ms": quiet, "cycles": len(parts),
        "launch_ms": _median([b - a for a, b, _ in parts]) if held else float("nan"),
        "tail_ms": _median([c - b for _, b, c in parts]) if held else float("nan"),
        "cycle_ms": _median([c - a for a, _, c in parts]),
        "model_gpu_ms": 1e3 * gpu, "model_gpu_less_eager_ms": 1e3 * (gpu - eager), "model_launch_ms": 1e3 * launch,
        "model_heavy_ms": 1e3 * cm.heavy_parts(shape, True)[0] if cm.power is not None else float("nan"),
    }
    d = quiet / 1e3 if decodes else 0.0
    for key, g in (("model_cycle_ms", gpu), ("model_cycle_less_eager_ms", gpu - eager)):
        row[key] = 1e3 * max(d + g, launch + tail) if launch > 0 else 1e3 * (d + max(g, host))
    if not held:
        row["model_cycle_worker_ms"] = 1e3 * max(d + gpu, launch - host + tail) if launch > 0 else row["model_cycle_ms"]
    if not decodes:
        row["model_ttft_ms"] = 1e3 * (cm.frontend_s + (max(gpu, launch + tail) if launch > 0 else host + gpu))
        row["model_ttft_less_eager_ms"] = 1e3 * (cm.frontend_s + (max(gpu - eager, launch + tail) if launch > 0
                                                                  else host + gpu))
    return row


def scenario_speed(res: dict[str, Any], run: float) -> float:
    """The mean of the probes bracketing the scenario (``device_trace.py`` records them since the
    twenty-sixth session), else the run's ``run``."""
    return probed_speed(res, run)


def folder_rows(folder: Path) -> tuple[float, list[dict[str, Any]]]:
    """The run's speed and one row per graph-less scenario, each priced at its own probed speed
    (rounded to 0.01, one cost model per speed)."""
    meta = json.loads((folder / "timings.json").read_text())
    speed, executor = run_speed(meta), run_executor(meta)
    models: dict[float, HostOverlapCostModel] = {}
    rows = []
    for res in meta["scenarios"]:
        if res["scenario"]["kind"] != "graphless":
            continue
        own = round(scenario_speed(res, speed), 2)
        if own not in models:
            models[own] = cost_model(meta, own, folder)
        row = scenario_row(models[own], res, executor)
        row.update(run=folder.name, host_speed=own, load=res["scenario"].get("load", 0))
        rows.append(row)
    return speed, rows


HEADER = ("speed load tok  ttft  | D     launch tail  cycle | model gpu (-eager) launch cycle (-eager) ttft (-eager)"
          " | worker cycle")
"""Column heads of the printed table (ms; the model's values with and without ``eager_layer_s``)."""
PRINTED = (("host_speed", "{:5.2f}"), ("load", " {:3d}"), ("tokens", " {:4d}"),
           ("ttft_ms", " {:5.1f} |"), ("decode_ms", " {:5.2f}"), ("launch_ms", " {:5.1f}"),
           ("tail_ms", " {:5.1f}"), ("cycle_ms", " {:5.1f} |"), ("model_gpu_ms", " {:5.1f}"),
           ("model_gpu_less_eager_ms", " ({:5.1f})"), ("model_launch_ms", " {:5.1f}"), ("model_cycle_ms", " {:5.1f}"),
           ("model_cycle_less_eager_ms", " ({:5.1f})"), ("model_ttft_ms", " {:5.1f}"),
           ("model_ttft_less_eager_ms", " ({:5.1f})"), ("model_cycle_worker_ms", " | {:5.1f}"))


def format_row(row: dict[str, Any]) -> str:
    """One scenario's printed line after its label (NaN where a value does not apply)."""
    return "".join(fmt.format(row.get(key, float("nan"))) for key, fmt in PRINTED)


def table_csv(rows: list[dict[str, Any]]) -> str:
    """The rows as CSV text (floats to 4 significant digits; a key a row lacks left empty)."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    w.writerows({k: f"{v:.4g}" if isinstance(v, float) else v for k, v in r.items()} for r in rows)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument("--csv", type=Path)
    args = p.parse_args(argv)
    missing = [str(f) for f in args.folders if not (f / "timings.json").is_file()]
    if missing:
        print(f"no timings.json in {', '.join(missing)} (device_trace.py --out folders)", file=sys.stderr)
        return 2
    every = []
    for folder in args.folders:
        try:
            speed, rows = folder_rows(folder)
        except ValueError as err:
            print(f"{folder}: {err}", file=sys.stderr)
            return 2
        every += rows
        print(f"{folder}  host speed {speed:.3f}  executor {rows[0]['executor'] if rows else '?'}")
        print(f"  {'scenario':44s} {HEADER}")
        for r in rows:
            print(f"  {r['scenario']:44s} {format_row(r)}")
    if args.csv:
        atomic_write_text(args.csv, table_csv(every))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
