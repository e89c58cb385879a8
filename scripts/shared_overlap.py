"""A shared-expert MoE layer with its shared expert on vLLM's second CUDA stream, against the same
layer run in one stream (``VLLM_DISABLE_SHARED_EXPERTS_STREAM=1``), from profiled decode steps.

``scripts/device_trace.py`` ``decode`` scenarios of one model, run twice on one machine (the
second stream off, then on), keep their raw torch traces (``FOLDER/torch``).  Per MoE layer of a
step the block runs from the router GEMM's end to the next residual-add norm's start (the
router runs before the streams fork):

* one stream: the shared path (gate-up, SiLU x mul, down, the shared gate's GEMM, sigmoid,
  product) from the router's end to the routed path's first kernel (``moeSoftmax``), then the
  routed path (softmax, top-k, align, the fused experts, their sum) to the norm;
* two streams: the routed path on the main stream, the shared path's kernels beside it.

``reduce FOLDER`` writes ``FOLDER/moe_blocks.csv``: per decode batch the median over its layers
of the block's wall, of the shared path's wall (one stream only) and of the routed path's, the
kernels' time by part (the second stream's as ``aux_us``), with the 10th and 90th percentile of
the wall.  ``compare SERIAL OVERLAP`` reads two reduced folders and prints per batch what the
second stream saved and what the shared path added beside the routed one (``extra``: the
two-stream wall less the one-stream routed path), with the cost model's
(:func:`latsim.costmodel.profile.tabulate.shared_beside_s` and ``shared_expert_s``, per layer)
for the traced model on ``--device``:

    python scripts/shared_overlap.py reduce data/traces/h100/s53/serial-qwen1.5-moe-a2.7b
    python scripts/shared_overlap.py compare data/traces/h100/s53/serial-qwen1.5-moe-a2.7b \\
        data/traces/h100/s53/overlap-qwen1.5-moe-a2.7b --device h100
"""

from __future__ import annotations

import argparse
import collections
import csv
import glob
import gzip
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROUTED = ("moeSoftmax", "moeTopK", "moe_align", "fused_moe_kernel", "act_and_mul", "moe_sum", "memcpy32")
ROUTING = ("moeSoftmax", "moeTopK", "moe_align")
COLUMNS = ("seqs", "layers", "wall_us", "wall_p10_us", "wall_p90_us", "shared_wall_us", "routed_wall_us",
           "routing_us", "experts_us", "shared_us", "aux_us")


def _kernels(path: str) -> tuple[int, list[dict[str, Any]]]:
    """(decode sequences of the trace's steps, its kernels by start time)."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    names = collections.Counter(e["name"] for e in events if e.get("cat") == "user_annotation")
    step = names.most_common(1)[0][0]  # e.g. execute_context_0(0)_generation_32(32)
    seqs = int(step.split("generation_")[1].split("(")[0])
    return seqs, sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])


def layer_blocks(kernels: list[dict[str, Any]]) -> list[dict[str, float]]:
    """One row per MoE layer (see the module note); the main stream is the busiest."""
    main = collections.Counter(e["tid"] for e in kernels).most_common(1)[0][0]
    on_main = [i for i, e in enumerate(kernels) if e["tid"] == main]
    rows = []
    for n, i in enumerate(on_main):
        if "moeSoftmax" not in kernels[i]["name"] or n < 2:
            continue
        # back on the main stream to the router GEMM: the first main kernel after the 'mm_t' cast
        back = n
        while back > 0 and "fused_mm_t" not in kernels[on_main[back]]["name"]:
            back -= 1
        ahead = n
        while ahead < len(on_main) and "rms_norm" not in kernels[on_main[ahead]]["name"]:
            ahead += 1
        if back == 0 or ahead == len(on_main):
            continue
        router, norm = kernels[on_main[back + 1]], kernels[on_main[ahead]]
        start, end = router["ts"] + router["dur"], norm["ts"]
        body = kernels[on_main[back + 1] + 1:on_main[ahead]]
        part = collections.Counter()
        for e in body:
            if e["tid"] != main:
                part["aux"] += e["dur"]
            elif any(r in e["name"] for r in ROUTING):
                part["routing"] += e["dur"]
            elif any(r in e["name"] for r in ROUTED):
                part["experts"] += e["dur"]
            else:
                part["shared"] += e["dur"]
        softmax = kernels[i]["ts"]
        rows.append({"wall": end - start, "shared_wall": softmax - start if not part["aux"] else float("nan"),
                     "routed_wall": end - softmax, **{k: float(part[k]) for k in ("routing", "experts", "shared",
                                                                                    "aux")}})
    return rows


def reduce(folder: Path) -> Path:
    """Write ``folder/moe_blocks.csv`` from ``folder/torch`` (module note)."""
    by_seqs: dict[int, list[dict[str, float]]] = collections.defaultdict(list)
    for path in sorted(glob.glob(str(folder / "torch" / "*.json.gz"))):
        seqs, kernels = _kernels(path)
        by_seqs[seqs] += layer_blocks(kernels)
    if not by_seqs:
        raise SystemExit(f"{folder}: no MoE layers in torch/*.json.gz")
    from latsim.atomic import atomic_write_text

    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(COLUMNS)
    for seqs in sorted(by_seqs):
        rows = by_seqs[seqs]
        med = {k: float(np.nanmedian([r[k] for r in rows])) if any(r[k] == r[k] for r in rows) else float("nan")
               for k in rows[0]}
        wall = [r["wall"] for r in rows]
        w.writerow([seqs, len(rows), *(f"{v:.2f}" for v in (
            med["wall"], np.percentile(wall, 10), np.percentile(wall, 90), med["shared_wall"], med["routed_wall"],
            med["routing"], med["experts"], med["shared"], med["aux"]))])
    out = folder / "moe_blocks.csv"
    atomic_write_text(out, text.getvalue())
    return out


def read_blocks(folder: Path) -> dict[int, dict[str, float]]:
    """``moe_blocks.csv`` of a reduced folder, by decode batch."""
    with open(folder / "moe_blocks.csv") as f:
        return {int(r["seqs"]): {k: float(v) for k, v in r.items()} for r in csv.DictReader(f)}


def compare(serial: Path, overlap: Path, device: str) -> list[dict[str, float]]:
    """Per decode batch both folders traced: the saving, the extra and the model's per-layer prices."""
    from latsim.catalog.lookup import load_device, load_model
    from latsim.costmodel.profile.regressors import load_predictors
    from latsim.costmodel.profile.tabulate import shared_beside_s, shared_expert_s
    from latsim.costmodel.shard import shard_model
    from latsim.paths import CALIBRATION

    model = json.loads((serial / "timings.json").read_text())["argv"]
    name = model[model.index("--model") + 1]
    dev = load_device(device)
    shard = shard_model(load_model(name))
    predictors = load_predictors(CALIBRATION / device)
    one, two = read_blocks(serial), read_blocks(overlap)
    rows = []
    for seqs in sorted(set(one) & set(two)):
        t = np.array([float(seqs)])
        rows.append({"seqs": seqs, "serial_wall": one[seqs]["wall_us"], "overlap_wall": two[seqs]["wall_us"],
                     "shared_alone": one[seqs]["shared_wall_us"], "routed_alone": one[seqs]["routed_wall_us"],
                     "saving": one[seqs]["wall_us"] - two[seqs]["wall_us"],
                     "extra": two[seqs]["wall_us"] - one[seqs]["routed_wall_us"],
                     "model_alone": float(shared_expert_s(predictors, shard, t, dev)[0]) / shard.moe_layers * 1e6,
                     "model_extra": float(shared_beside_s(shard, t, dev)[0]) / shard.moe_layers * 1e6})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reduce", help="write FOLDER/moe_blocks.csv from FOLDER/torch")
    r.add_argument("folder", type=Path)
    c = sub.add_parser("compare", help="one stream against two, per decode batch")
    c.add_argument("serial", type=Path)
    c.add_argument("overlap", type=Path)
    c.add_argument("--device", default="h100")
    a = p.parse_args(argv)
    if a.cmd == "reduce":
        print(reduce(a.folder))
        return 0
    rows = compare(a.serial, a.overlap, a.device)
    keys = list(rows[0]) if rows else []
    print("  ".join(f"{k:>12}" for k in keys))
    for row in rows:
        print("  ".join(f"{row[k]:12.1f}" for k in keys))
    print("microseconds a MoE layer, medians over the traced layers; extra = two-stream wall - one-stream routed "
          "path; model_*: the cost model's shared path alone and beside the routed experts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
