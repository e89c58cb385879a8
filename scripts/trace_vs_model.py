"""The kernels of a profiled live engine beside the cost model's price of the same steps.

Reads a folder of ``scripts/device_trace.py`` (``steps.csv``: one row per profiled engine step,
its composition and its GPU kernels' busy time by class; ``timings.json``: the run's argv,
engine configuration and the decoders' context) and prices every step with the engine's default
cost model for the run's catalog model on the GPU the trace recorded (``gpu_name``; the H200 for
the traces from before it was kept; ``--device`` and ``--profile`` choose another GPU or a fitted
profile folder; ``graphless_steps.cost_model``), GPU side only: the inner model's step time x
``gpu_scale`` (with a mixture of experts' padded graph tokens: ``HostOverlapCostModel.kernel_s``),
without the host and graph-less (eager) terms, which are not kernel time.  Heavy
steps (prefill work, at least the power data's ``heavy_tokens``) are priced at the profile's
price and at the power cap's full-clock and capped ratios (:mod:`latsim.costmodel.power`),
between which a live step falls.

A step's shape is rebuilt from its row:

* decode rows: each at the decoders' context, ``context_at_profile``'s mean when the scenario
  recorded it, else the scenario's ``din`` plus a second of decoding at its quiet step time
  (as ``graphless_steps.py`` does);
* a prefill chunk (one prompt per step, the scenarios send their prompts one after another):
  cached context = the prompt's tokens before it.  A chunk shorter than the step's prefill
  budget ends its prompt (context ``in - chunk``); a full chunk follows the prompt's previous
  chunk, or starts a prompt after a step that ended one.  The first full chunk of the profiled
  window, whose predecessor is unseen, is left out (``unplaced``).
* a ``burst`` scenario's steps (its ``n`` prompts sent at once, several in a step): the prompts
  are taken first come, first served, a step's last prompt cut at the token budget and finished
  in the next step (:class:`BurstPlacer`); each chunk's context is the prompt's tokens before it.
  Steps that do not fit that packing are left out (``unplaced``).

Per scenario it prints the median over its steps of the measured busy time, attention and the
rest (GEMMs, norms, activations, sampling, copies), the model's (attention = prefill +
decode attention, :meth:`CalibratedCostModel.attention_s`), and their ratio; ``--csv`` writes
one row per step.

    python scripts/trace_vs_model.py data/traces/h200/llama-3.1-8b-mixed [--csv steps_vs_model.csv]
    python scripts/trace_vs_model.py data/traces/h100/s41/llama-3.1-8b [--profile COPY]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from graphless_steps import cost_model
from prefill_batch_check import one_call_us

from latsim.atomic import atomic_write_text
from latsim.catalog.lookup import detect_device
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.host import HostOverlapCostModel
from latsim.costmodel.profile.regressors import load_predictors
from latsim.costmodel.profile.store import has_profile
from latsim.costmodel.profile.tabulate import heads_of


def decode_context(result: dict[str, Any]) -> int:
    """The decoders' context (tokens) during a scenario's profiled steps (module docstring)."""
    recorded = result.get("context_at_profile")
    if recorded:
        return round(statistics.fmean(float(c) for c in recorded))
    sc = result["scenario"]
    din = int(sc.get("din", sc.get("in", 0)))
    quiet = float(result.get("decode_itl_quiet_ms", 0.0) or 0.0)
    return din + (int(1000.0 / quiet) if quiet > 0 else 0)


class ChunkPlacer:
    """Cached context of each prefill chunk of a scenario whose prompts of ``prompt_tokens``
    arrive one at a time (module docstring); ``None`` where it cannot be told."""

    def __init__(self, prompt_tokens: int, budget: int) -> None:
        self.prompt_tokens, self.budget = prompt_tokens, budget
        self.next_ctx: int | None = None  # context of the next chunk; None: unknown

    def place(self, chunk: int, decode_rows: int) -> int | None:
        if chunk <= 0:
            return None
        if chunk >= self.prompt_tokens:  # the whole prompt in one step
            self.next_ctx = 0
            return 0
        full = chunk + decode_rows >= self.budget
        if not full:  # the last chunk of its prompt
            self.next_ctx = 0
            return self.prompt_tokens - chunk
        ctx = self.next_ctx
        self.next_ctx = None if ctx is None else ctx + chunk
        return ctx

    def idle(self) -> None:
        """A step without a prefill: the next chunk starts a prompt."""
        self.next_ctx = 0


class BurstPlacer:
    """The chunks of each step of a burst of ``count`` prompts of ``prompt_tokens`` sent at once
    (module docstring): the step's prompts are the first ones with tokens left, each taking all
    it has left but the last, which takes the rest of the step's tokens."""

    def __init__(self, prompt_tokens: int, count: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.left = [prompt_tokens] * count

    def place(self, tokens: int, prompts: int) -> list[tuple[int, int]] | None:
        """``(chunk, cached context)`` of each of the step's ``prompts``, or None (and nothing
        taken) when ``tokens`` cannot be split that way."""
        open_ = [j for j, left in enumerate(self.left) if left > 0][:prompts]
        if prompts <= 0 or len(open_) < prompts:
            return None
        whole = sum(self.left[j] for j in open_[:-1])
        last = tokens - whole
        if not 0 < last <= self.left[open_[-1]]:
            return None
        takes = [self.left[j] for j in open_[:-1]] + [last]
        chunks = [(take, self.prompt_tokens - self.left[j]) for j, take in zip(open_, takes, strict=True)]
        for j, take in zip(open_, takes, strict=True):
            self.left[j] -= take
        return chunks


SKIP, UNPLACED = "skip", "unplaced"
"""What :func:`serial_chunks` and :func:`burst_chunks` return for a step left out of the table, and
for one whose chunks cannot be told (a row marked ``unplaced``)."""


def serial_chunks(step: dict[str, str], placer: ChunkPlacer) -> list[tuple[int, int]] | str:
    """``(chunk, context)`` of a step of a scenario whose prompts come one at a time (none for a
    decode-only step); a step of several prompts is skipped (its contexts are unknown)."""
    chunk, decodes = int(step["prefill_tokens"]), int(step["decode_reqs"])
    if int(step["prefill_reqs"]) > 1:
        return SKIP
    if chunk <= 0:
        placer.idle()
        return []
    ctx = placer.place(chunk, decodes)
    return UNPLACED if ctx is None else [(chunk, ctx)]


def burst_chunks(step: dict[str, str], placer: BurstPlacer) -> list[tuple[int, int]] | str:
    """``(chunk, context)`` of each prompt in a step of a ``burst`` scenario (steps without a
    prompt are skipped)."""
    tokens = int(step["prefill_tokens"])
    if tokens <= 0:
        return SKIP
    placed = placer.place(tokens, int(step["prefill_reqs"]))
    return UNPLACED if placed is None else placed


def heads_rule_attention_us(cm: HostOverlapCostModel, chunks: list[tuple[int, int]],
                            profile: Path | None = None) -> float:
    """The prefill attention of a step of several chunks priced by the ``n``-times-the-heads rule
    (``scripts/prefill_batch_check.py``): every layer one call of the chunks' mean size and
    context under ``n`` times the heads, from the profile's regressor (``profile``, else the
    device's shipped one); NaN for a step of fewer than two chunks or a GPU without a profile."""
    inner = cm.inner
    device = getattr(inner, "device", None)
    folder = profile or (has_profile(device.name, device.aliases) if device is not None else None)
    if len(chunks) < 2 or folder is None:
        return float("nan")
    n = len(chunks)
    hq, hkv, d = heads_of(inner.shard, inner.model.head_dim)
    q, ctx = (sum(c[i] for c in chunks) / n for i in (0, 1))
    return inner.shard.layers * one_call_us(load_predictors(folder), device, q, ctx, (n * hq, n * hkv, d)) \
        * cm.host.gpu_scale


def model_row(cm: HostOverlapCostModel, shape: BatchShape) -> dict[str, float]:
    """The model's GPU microseconds of ``shape``: total at the profile's price, at full clock
    and capped, and its attention."""
    inner = cm.inner
    scale = cm.host.gpu_scale
    total = cm.kernel_s(shape)
    cap = getattr(inner, "power", None)
    heavy, full, capped = inner.heavy_parts(shape) if cap is not None and cap.is_heavy(shape) else (0.0, 1.0, 1.0)
    heavy *= scale
    attention = inner.attention_s(shape) * scale if hasattr(inner, "attention_s") else float("nan")
    return {"model_us": 1e6 * total, "model_full_us": 1e6 * (total - heavy + heavy * full),
            "model_capped_us": 1e6 * (total - heavy + heavy * capped), "model_attention_us": 1e6 * attention}


def run_device(meta: dict[str, Any]) -> str:
    """The catalog GPU a trace ran on: its ``gpu_name`` (recorded since the forty-first session)
    read as a catalog device, else ``h200`` (every earlier trace ran there)."""
    name = meta.get("gpu_name")
    return detect_device(str(name)).name if name else "h200"


def step_rows(folder: Path, device: str | None = None, profile: Path | None = None) -> list[dict[str, Any]]:
    """One row per placed step: its composition, measured busy time and parts, and the model's on
    ``device`` (default :func:`run_device`), priced by ``profile`` when given."""
    meta = json.loads((folder / "timings.json").read_text())
    cm = cost_model(meta, 1.0, folder, device or run_device(meta), profile)
    budget = int(meta.get("engine_config", {}).get("max_num_batched_tokens") or 8192)
    results = {r["scenario"]["label"]: r for r in meta["scenarios"]}
    rows: list[dict[str, Any]] = []
    with (folder / "steps.csv").open() as fh:
        steps = list(csv.DictReader(fh))
    placers: dict[str, ChunkPlacer] = {}
    bursts: dict[str, BurstPlacer] = {}
    for step in steps:
        label = step["scenario"]
        result = results.get(label)
        if result is None:
            continue
        sc = result["scenario"]
        if sc["kind"] == "burst":
            chunks = burst_chunks(step, bursts.setdefault(label, BurstPlacer(int(sc["in"]), int(sc["n"]))))
        else:
            chunks = serial_chunks(step, placers.setdefault(label, ChunkPlacer(int(sc.get("in", 0)), budget)))
        if chunks == SKIP:
            continue
        if chunks == UNPLACED:
            rows.append({"scenario": label, "step": int(step["step"]), "unplaced": True})
            continue
        assert isinstance(chunks, list)
        decodes = int(step["decode_reqs"])
        shape = BatchShape.from_chunks(chunks, [decode_context(result)] * decodes)
        row: dict[str, Any] = {"scenario": label, "step": int(step["step"]), "unplaced": False,
                               "prefill_tokens": int(step["prefill_tokens"]), "prefill_reqs": len(chunks),
                               "prefill_context": round(sum(c for _, c in chunks) / len(chunks)) if chunks else 0,
                               "decode_reqs": decodes}
        busy = float(step["gpu_busy_us"])
        row.update({"gpu_busy_us": busy, "span_us": float(step.get("span_us") or "nan"),
                    "attention_us": float(step["attention_us"]), "rest_us": busy - float(step["attention_us"]),
                    "comm_us": float(step.get("comm_us") or "nan")})  # all-reduce kernels (TP > 1)
        row.update(model_row(cm, shape))
        row["model_rest_us"] = row["model_us"] - row["model_attention_us"]
        row["model_attention_heads_us"] = heads_rule_attention_us(cm, chunks, profile) if not decodes else float("nan")
        rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario (and per step composition within it), medians of the placed steps."""
    groups: dict[tuple[str, bool, bool, int], list[dict[str, Any]]] = {}
    for row in rows:
        if not row["unplaced"]:
            key = (row["scenario"], row["prefill_tokens"] > 0, row["decode_reqs"] > 0, row["prefill_reqs"])
            groups.setdefault(key, []).append(row)
    out = []
    for (label, has_prefill, has_decode, prompts), group in groups.items():
        med = {k: statistics.median(r[k] for r in group)
               for k in ("gpu_busy_us", "span_us", "attention_us", "rest_us", "model_us", "model_full_us",
                         "model_capped_us", "model_attention_us", "model_rest_us", "prefill_tokens",
                         "decode_reqs", "model_attention_heads_us")}
        kind = "+".join(p for p, on in (("prefill" + (f" x{prompts}" if prompts > 1 else ""), has_prefill),
                                        ("decode", has_decode)) if on)
        out.append({"scenario": label, "steps": kind, "n": len(group), **med})
    return out


def format_summary(rows: list[dict[str, Any]], unplaced: int) -> str:
    lines = [f"{'scenario':42} {'steps':15} {'n':>3} {'tokens':>6} {'busy':>8} {'model':>8} {'ratio':>6} "
             f"{'full..capped':>13} {'attn':>8} {'model':>8} {'heads':>8} {'rest':>8} {'model':>8} {'span':>8} "
             f"{'/span':>6}"]
    for r in rows:
        ratio = r["model_us"] / r["gpu_busy_us"] if r["gpu_busy_us"] else float("nan")
        span = f"{r['model_full_us'] / r['gpu_busy_us']:.3f}-{r['model_capped_us'] / r['gpu_busy_us']:.3f}"
        tokens = int(r["prefill_tokens"] + r["decode_reqs"])
        lines.append(f"{r['scenario'][:42]:42} {r['steps']:15} {r['n']:3d} {tokens:6d} "
                     f"{r['gpu_busy_us'] / 1e3:8.2f} {r['model_us'] / 1e3:8.2f} {ratio:6.3f} {span:>13} "
                     f"{r['attention_us'] / 1e3:8.2f} {r['model_attention_us'] / 1e3:8.2f} "
                     f"{r['model_attention_heads_us'] / 1e3:8.2f} "
                     f"{r['rest_us'] / 1e3:8.2f} {r['model_rest_us'] / 1e3:8.2f} {r['span_us'] / 1e3:8.2f} "
                     f"{r['model_us'] / r['span_us']:6.3f}")
    lines.append("milliseconds of GPU kernels per step, medians; ratio = model / measured; "
                 f"full..capped: the model's ratio at the power cap's two clocks; heads: a step of several prompts' "
                 f"attention by the n-times-the-heads rule (nan otherwise); span: first kernel's start to the "
                 f"last one's end (a shared-expert MoE's second stream runs kernels at once: its busy time exceeds "
                 f"the step, compare /span); {unplaced} steps unplaced")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a device_trace.py output folder (steps.csv, timings.json)")
    ap.add_argument("--csv", type=Path, help="write one row per step here")
    ap.add_argument("--device", help="the catalog GPU to price on (default: the trace's recorded GPU, else h200)")
    ap.add_argument("--profile", type=Path, help="a fitted profile folder to price the GPU with (default: the "
                    "device's shipped one)")
    args = ap.parse_args(argv)
    for name in ("steps.csv", "timings.json"):
        if not (args.folder / name).is_file():
            print(f"error: {args.folder / name} not found (a scripts/device_trace.py folder holds steps.csv "
                  "and timings.json)", file=sys.stderr)
            return 2
    try:
        rows = step_rows(args.folder, args.device, args.profile)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary(rows), sum(1 for r in rows if r["unplaced"])))
    if args.csv:
        placed = [r for r in rows if not r["unplaced"]]
        buf = io.StringIO()
        if placed:
            writer = csv.DictWriter(buf, fieldnames=list(placed[0]))
            writer.writeheader()
            writer.writerows(placed)
        atomic_write_text(args.csv, buf.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
