"""Fit the memory plan's coefficients (``latsim/data/engines/vllm/memory.yaml``) on logged engine starts.

What vLLM 0.25.1 leaves out of the KV cache besides the weights ("other": the budget less the
plan's weights less the KV cache the engine logged) is fitted as

    non_torch_bytes + max(forward, sampler) + fused-MoE workspace + graph estimate

(:func:`latsim.engines.vllm.memory.activation_peak_bytes`, :func:`~latsim.engines.vllm.memory.graph_estimate_bytes`),
on two kinds of starts:

- every live run's engine (``data/validation``, ``data/host``, ``data/serve``: ``meta.json``'s
  ``num_gpu_blocks``), one row per distinct engine;
- the memory probes (``data/memory/*/*.log.gz``: engines started without load that differ in
  vocabulary, token budget or sequences; ``Available KV cache memory``).

Fitted: ``non_torch_bytes``, ``forward_hidden_multiple``, ``sampler_bytes_per_logit`` and
``sampler_bytes_per_head_element``, on dense bf16 engines at tensor parallelism 1 measured on
the H200 and the probes; then, with those fixed, ``v1_sampler_bytes_per_logit`` on the starts of
mixtures of experts that vLLM runs on its V1 model runner, whose ``v1_cuda_graph_estimate_bytes``
is the median estimate those engines logged (``data/memory/README.md``).  Stated, not fitted:
the forward's MLP (3: gate/up output and the activated product) and QKV (1) multiples, which the
probes' slopes over the token budget give on two widths, and the MoE workspace's.  Held out and
reported: the H100's live engines; reported but not fitted: quantized weights (the plan's weights
differ from the loaded ones by up to 1.4 GiB) and tensor parallelism; held out and reported too:
mixtures of experts on the V1 runner other than those of :data:`V1_FIT_MODELS` (Mixtral-8x7B's
starts on the H200, which test how the V1 runner's terms carry to another MoE).

    python scripts/fit_memory.py            # print the fit and every start's residual
    python scripts/fit_memory.py --write    # and write memory.yaml (atomically)
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).parent))

from device_memory_probe import DEFAULT_SEQS, logged_graph_estimate, read_log  # type: ignore[import-not-found]

from latsim.atomic import atomic_write_text
from latsim.catalog.lookup import detect_device, load_device, load_model
from latsim.deployment import Deployment, EngineConfig, resolve_engine
from latsim.engines.vllm.memory import (
    activation_peak_bytes,
    budget_bytes,
    graph_estimate_bytes,
    non_torch_bytes,
    pool_block_bytes,
    runs_on_v1_runner,
    weights_per_gpu,
)
from latsim.measure.records import read_meta
from latsim.paths import engine_data
from latsim.validate.compare import deployment_for, recorded_device

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
LIVE_DIRS = ("data/validation", "data/host", "data/serve")
PROBE_GPU = "h100"
"""The GPU of a probe whose ``memory.jsonl`` row names none and whose folder's name does not end in
``-<gpu>`` (those ran on the lent H100 SXM; ``s40-mixtral-h200`` on the H200: its README)."""
HELD_OUT_SOURCES = ("data/validation/h200-s40",)
"""Live H200 runs that arrived after the fit (the fortieth session's): reported, not fitted."""
V1_FIT_MODELS = ("qwen3-30b-a3b",)
"""The V1 runner's terms are fitted on these models' starts; another V1-runner MoE is held out."""
PROBE_MAX_MODEL_LEN = 4096
PROBE_NAME = re.compile(r"^(.+)-v\d+-t\d+-s\d+\.log\.gz$")
"""A probe log's name: the catalog model, then the start's vocabulary, tokens and sequences."""
FITTED = ("non_torch_bytes", "forward_hidden_multiple", "sampler_bytes_per_logit", "sampler_bytes_per_head_element")
START = {"non_torch_bytes": 3e8, "forward_hidden_multiple": 1.5, "sampler_bytes_per_logit": 3.0,
         "sampler_bytes_per_head_element": 1.5}
V1_FITTED = ("v1_sampler_bytes_per_logit",)
V1_START = {"v1_sampler_bytes_per_logit": 12.0, "v1_cuda_graph_estimate_bytes": 0.0}
STATED = {
    "activation_bytes_per_element": 2,
    "forward_mlp_multiple": 3,
    "forward_qkv_multiple": 1,
    "moe_workspace_intermediate_multiple": 3,
    "non_torch_bytes_per_extra_gpu": 2.5e8,  # NCCL buffers per GPU when tp > 1: an estimate, not measured
    "cuda_graph_bytes": 0.0,  # vLLM's V2 model runner (dense models) estimates its graphs at 0 before sizing the cache
}


@dataclass(frozen=True)
class Start:
    """One engine start: what it ran and what it left out of the KV cache besides the weights."""

    source: str
    deployment: Deployment
    other_bytes: float
    kv_bytes: float
    graph_estimate_bytes: float | None = None
    """The CUDA-graph estimate the engine logged (V1-runner probes only; None where not read)."""

    @property
    def role(self) -> str:
        """``fit``, ``held out`` (the H100's live engines) or why the fit leaves it out."""
        d = self.deployment
        if d.weight_dtype != "bf16":
            return "quantized"
        if runs_on_v1_runner(d.model):
            return "MoE, V1 runner" if d.model.name in V1_FIT_MODELS else "held out, V1 runner"
        if d.tp > 1:
            return "tp"
        if d.device.name == "h100" and not self.source.startswith("data/memory"):
            return "held out"
        if self.source.startswith(HELD_OUT_SOURCES):
            return "held out"
        return "fit"


def live_starts() -> list[Start]:
    """One start per distinct engine among the live runs (model, GPU, TP, KV dtype, blocks)."""
    seen: dict[tuple, Start] = {}
    for folder in LIVE_DIRS:
        for meta_path in sorted((ROOT / folder).rglob("meta.json")):
            meta = read_meta(meta_path.parent)
            ec = meta.get("engine_config") or {}
            if not ec.get("num_gpu_blocks") or not (meta.get("model") or {}).get("config"):
                continue
            device = recorded_device(meta)
            if device is None:  # a copy of a validation engine (data/serve) that did not record its GPU
                continue
            deployment = deployment_for(meta, device)
            key = (deployment.model.name, device, deployment.tp, deployment.kv_dtype, ec["num_gpu_blocks"])
            if key not in seen:
                seen[key] = _live_start(str(meta_path.parent.parent.relative_to(ROOT)), deployment)
    return list(seen.values())


def _live_start(source: str, deployment: Deployment) -> Start:
    engine = resolve_engine(deployment)
    kv = float(engine.num_gpu_blocks or 0) * pool_block_bytes(deployment, engine)
    return Start(source, deployment, budget_bytes(deployment, engine) - weights_per_gpu(deployment, engine) - kv, kv)


def probe_starts() -> list[Start]:
    """The memory probes' engines, from their logs (the model is the file name's prefix; the
    thirty-eighth session's ``vocabV`` files are the Llama-3.2-1B body)."""
    starts = []
    for log in sorted((ROOT / "data" / "memory").glob("*/*.log.gz")):
        device = load_device(probe_device(log))
        with gzip.open(log, "rt", errors="replace") as fh:
            found = read_log(fh.read())
        named = PROBE_NAME.match(log.name)
        name = named.group(1) if named else "llama-3.2-1b"
        model = replace(load_model(name), vocab_size=int(found["vocab"]))
        engine = EngineConfig(max_num_seqs=int(found.get("seqs", DEFAULT_SEQS)),
                              max_num_batched_tokens=int(found["tokens"]),
                              max_model_len=PROBE_MAX_MODEL_LEN, gpu_memory_utilization=0.92)
        deployment = Deployment(model=model, device=device, tp=1, engine=engine)
        kv = found["kv_cache_gib"] * GIB
        other = budget_bytes(deployment, engine) - weights_per_gpu(deployment, engine) - kv
        graphs = logged_graph_estimate(found, engine.gpu_memory_utilization, device.memory_bytes)
        starts.append(Start(str(log.relative_to(ROOT)), deployment, other, kv, graphs))
    return starts


def probe_gpu(folder: str) -> str:
    """The catalog GPU a probe folder ran on: its name's ``-<gpu>`` suffix, else :data:`PROBE_GPU`."""
    suffix = folder.rsplit("-", 1)[-1]
    return suffix if suffix in ("h100", "h200") else PROBE_GPU


def probe_device(log: Path) -> str:
    """The catalog GPU of one probe log: the ``gpu_name`` its row in the folder's ``memory.jsonl``
    recorded (``device_memory_probe.py`` records it since the fortieth session), else the folder's
    (:func:`probe_gpu`)."""
    rows = log.parent / "memory.jsonl"
    name = log.name.removesuffix(".log.gz")
    for line in rows.read_text().splitlines() if rows.is_file() else ():
        row = json.loads(line)
        if row.get("name") == name and row.get("gpu_name"):
            return detect_device(str(row["gpu_name"])).name
    return probe_gpu(log.parent.name)


def predicted_other(start: Start, coefficients: dict) -> float:
    """The plan's non-weight bytes for ``start`` under ``coefficients``."""
    d = start.deployment
    peak = activation_peak_bytes(d.model, d.tp, resolve_engine(d), coefficients)
    return non_torch_bytes(d.tp, coefficients) + peak + graph_estimate_bytes(d.model, coefficients)


def fit(starts: list[Start]) -> dict:
    """Least squares (GiB) of the dense coefficients over the ``fit`` starts, then the V1 runner's:
    its graph estimate is the median the engines logged, its sampler's bytes a logit fitted on its
    starts with the rest fixed."""
    dense = _least_squares([s for s in starts if s.role == "fit"], STATED | V1_START, FITTED, START)
    v1 = [s for s in starts if s.role == "MoE, V1 runner"]
    logged = [s.graph_estimate_bytes for s in v1 if s.graph_estimate_bytes is not None]
    graphs = {"v1_cuda_graph_estimate_bytes": round(float(np.median(logged)), -6)}
    return _least_squares(v1, {**dense, **graphs}, V1_FITTED, V1_START)


def _least_squares(rows: list[Start], fixed: dict, names: tuple[str, ...], start: dict) -> dict:
    def residuals(x: np.ndarray) -> list[float]:
        c = {**fixed, **dict(zip(names, x, strict=True))}
        return [(predicted_other(s, c) - s.other_bytes) / GIB for s in rows]

    result = least_squares(residuals, x0=[start[k] for k in names])
    fitted = {k: round(float(v), 4 if k != "non_torch_bytes" else -6) for k, v in zip(names, result.x, strict=True)}
    return {**fixed, **fitted}


def report(starts: list[Start], coefficients: dict) -> list[dict]:
    """Every start's measured and predicted non-weight GiB and the KV capacity the plan misses by."""
    out = []
    for s in sorted(starts, key=lambda s: (s.role, s.source)):
        residual = predicted_other(s, coefficients) - s.other_bytes
        out.append({"source": s.source, "model": s.deployment.model.name, "gpu": s.deployment.device.name,
                    "role": s.role, "measured_gib": round(s.other_bytes / GIB, 3),
                    "predicted_gib": round((s.other_bytes + residual) / GIB, 3),
                    "kv_capacity_error_pct": round(-100 * residual / s.kv_bytes, 2)})
    return out


def write(coefficients: dict, rows: list[dict]) -> None:
    fitted = [r for r in rows if r["role"] in ("fit", "MoE, V1 runner")]
    rms = float(np.sqrt(np.mean([(r["predicted_gib"] - r["measured_gib"]) ** 2 for r in fitted])))
    document = {
        "provenance": {
            "method": (f"scripts/fit_memory.py: least squares over {len(fitted)} engine starts (dense bf16 at "
                       f"tensor parallelism 1: the H200's live engines and the H100's memory probes; then "
                       f"the V1 runner's sampler on Qwen3-30B-A3B's three), rms {rms:.3f} GiB; the other "
                       f"rows (held out, quantized, tp) are reported, not fitted"),
            "date": date.today().isoformat(),
            "starts": rows,
        },
        **coefficients,
    }
    header = ("# Written by scripts/fit_memory.py (do not edit by hand).  What vLLM 0.25.1 leaves out of\n"
              "# the KV cache besides the weights: non_torch_bytes + max(forward, sampler) + MoE workspace\n"
              "# (latsim/engines/vllm/memory.py, activation_peak_bytes; data/memory/README.md).\n")
    atomic_write_text(engine_data("vllm", "memory.yaml"), header + yaml.safe_dump(document, sort_keys=False, width=100))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write latsim/data/engines/vllm/memory.yaml")
    args = ap.parse_args()
    starts = live_starts() + probe_starts()
    coefficients = fit(starts)
    rows = report(starts, coefficients)
    print({k: coefficients[k] for k in (*FITTED, *V1_FITTED, "v1_cuda_graph_estimate_bytes")})
    for r in rows:
        print(f"{r['role']:14s} {r['gpu']:5s} {r['model']:18s} other {r['measured_gib']:6.3f} -> "
              f"{r['predicted_gib']:6.3f} GiB  KV {r['kv_capacity_error_pct']:+6.2f} %  {r['source']}")
    if args.write:
        write(coefficients, rows)
        print(f"wrote {engine_data('vllm', 'memory.yaml')}")


if __name__ == "__main__":
    main()
