"""Operator shapes of the catalog's models, the raw material of the calibration grids.

Runs on the development machine only (it reads the catalog); its output,
``data/grids/shapes.json``, travels to the GPU machine, whose benchmark runner must not
import the catalog (it needs pydantic, which the GPU image lacks).  ``python -m
latsim.calibration.shapes`` rewrites the file; a test checks that the shipped file is current.

Shapes are per GPU of a tensor-parallel group, for TP 1, 2, 4 and 8 wherever vLLM accepts the
split and the bf16 weights fit in :data:`FIT_BYTES` per GPU (a deployment nobody can run
would only spend benchmark time).  Each unique shape keeps the ``model/tpN/op`` tags that use it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from latsim.atomic import atomic_write_text
from latsim.paths import GRIDS

SHAPES_FILE = GRIDS / "shapes.json"
TPS = (1, 2, 4, 8)
FIT_BYTES = 120e9  # bf16 weights per GPU must fit an 141 GB H200 with room for KV


def _add(table: dict[tuple[int, ...], list[str]], key: tuple[int, ...], tag: str) -> None:
    table.setdefault(key, []).append(tag)


def _gemms(s: Any) -> dict[str, tuple[int, int]]:
    """(K, N) of each linear GEMM of one GPU: the step's (as the cost model lists them,
    :func:`~latsim.costmodel.profile.tabulate.step_gemms`) and the LM head's.  The MoE router's
    (a few to 128 columns, bf16 only) and a shared expert's gate (one column) are left out: the
    grids' fp8 and 4-bit GEMMs take every k-th shape of this table, and a new row would move that
    selection for every model (the ``narrow`` grid times them, ``latsim.calibration.grid``)."""
    from latsim.costmodel.profile.tabulate import step_gemms

    out = {g.op: (g.k, g.n) for g in step_gemms(s) if g.op not in ("router", "shared_expert_gate")}
    out["lm_head"] = (s.hidden, s.vocab_shard)
    return out


def build_shapes() -> dict[str, Any]:
    """Unique GEMM, attention and MoE shapes of every catalog model at TP 1/2/4/8."""
    from latsim.catalog import list_models, load_model
    from latsim.catalog.sizing import weight_bytes
    from latsim.costmodel.shard import shard_model

    gemm: dict[tuple[int, ...], list[str]] = {}
    attn: dict[tuple[int, ...], list[str]] = {}
    moe: dict[tuple[int, ...], list[str]] = {}
    for name in list_models():
        model = load_model(name)
        for tp in TPS:
            try:
                s = shard_model(model, tp)
            except ValueError:
                continue
            if weight_bytes(model, "bf16") / tp > FIT_BYTES:
                continue
            tag = f"{name}/tp{tp}"
            for op, kn in _gemms(s).items():
                _add(gemm, kn, f"{tag}/{op}")
            hd = model.head_dim
            _add(attn, (s.q_width // hd, s.kv_width // hd, hd), tag)
            if s.experts:
                _add(moe, (s.experts, s.top_k, s.hidden, s.expert_width), tag)
    return {
        "gemm": [{"K": k[0], "N": k[1], "tags": t} for k, t in sorted(gemm.items())],
        "attention": [{"hq": k[0], "hkv": k[1], "d": k[2], "tags": t} for k, t in sorted(attn.items())],
        "moe": [{"experts": k[0], "top_k": k[1], "hidden": k[2], "inter": k[3], "tags": t}
                for k, t in sorted(moe.items())],
    }


def load_shapes(path: Path = SHAPES_FILE) -> dict[str, Any]:
    """The shipped shape table (no catalog import)."""
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def write_shapes(path: Path = SHAPES_FILE) -> None:
    atomic_write_text(path, json.dumps(build_shapes(), indent=1) + "\n")


if __name__ == "__main__":
    write_shapes()
