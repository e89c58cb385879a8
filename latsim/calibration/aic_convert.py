"""AIConfigurator tables -> latsim calibration tables (the row format of :mod:`latsim.costmodel.profile.tables`).

Each converter keeps the rows that describe what latsim's vLLM model runs, converts
milliseconds to seconds, computes FLOPs and bytes with latsim's own definitions (the
``work`` functions of the benchmark modules, so fitting and prediction agree), and returns a
DataFrame with ``point_id``, ``status``, the shape columns, ``median_s`` and ``impl``.

Selection (each recorded in ``profile.json`` by :func:`selection_notes`):

* GEMM: ``bfloat16`` -> ``bf16``; ``fp8`` (per-tensor scaled) -> ``fp8``; block-scaled and 4-bit
  formats are left out (latsim prices W8A8 with the per-tensor curve).
* Context attention: bf16 KV, no sliding window, the table's most common kernel, and per shape
  the smallest batch measured (1 where present), time divided by the batch: one sequence of
  ``isl`` new tokens, nothing cached (latsim's ``prefill`` row with ``ctx = 0``).
* Generation attention: bf16 KV, no window, most common kernel; ``step`` cached tokens plus the
  new one is the context of every sequence (``uniform`` mix).
* MoE: bf16 weights, no expert or tensor parallelism (``moe_tp_size = moe_ep_size = 1``), the
  ``balanced`` routing when measured, else the least skewed power law; most common kernel.
* All-reduce (vLLM custom all-reduce, bf16): rows timed inside CUDA graphs -> mode ``vllm_custom``;
  eager rows -> the eager table (no ``mode``); ``message_size`` is elements (2 bytes each).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from latsim.calibration import attention, gemm, moe

MS = 1e-3
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}


def _main_kernel(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Rows of the most common ``kernel_source`` (ties: alphabetical), and its name."""
    if "kernel_source" not in df.columns or df.empty:
        return df, "unnamed"
    counts = df["kernel_source"].value_counts()
    name = sorted(counts[counts == counts.max()].index)[0]
    return df[df["kernel_source"] == name], str(name)


def _plain_attention(df: pd.DataFrame) -> pd.DataFrame:
    keep = df["kv_cache_dtype"].astype(str).isin(["bfloat16", "bf16"])
    if "window_size" in df.columns:
        keep &= df["window_size"].fillna(0) == 0
    return df[keep]


def _frame(rows: dict[str, Any], family: str, id_cols: tuple[str, ...], impl: str, prefix: str = "") -> pd.DataFrame:
    """Rows with ``point_id`` (``family:prefix`` then ``col=value`` of ``id_cols``), ``family``, ``status``, impl."""
    out = pd.DataFrame(rows)
    ids = pd.Series(f"{family}:{prefix}", index=out.index)
    for i, col in enumerate(id_cols):
        ids = ids + ("," if i else "") + f"{col}=" + out[col].astype("int64").astype(str)
    out.insert(0, "point_id", ids)
    out.insert(1, "family", family)
    out.insert(2, "status", "ok")
    out["impl"] = impl
    return out.drop_duplicates("point_id").reset_index(drop=True)


def convert_gemm(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """latsim ``gemm`` rows and the kernel used per dtype."""
    parts, kernels = [], {}
    for src, dtype in GEMM_DTYPES.items():
        sel, kern = _main_kernel(df[df["gemm_dtype"] == src])
        if sel.empty:
            continue
        m, k, n = (sel[c].to_numpy(np.float64) for c in ("m", "k", "n"))
        flops, nbytes = np.vectorize(gemm.gemm_work, otypes=[np.float64, np.float64])(m, k, n, dtype)
        parts.append(
            _frame(
                {
                    "dtype": dtype,
                    "K": k,
                    "N": n,
                    "M": m,
                    "median_s": sel["latency"].to_numpy() * MS,
                    "flops": flops,
                    "bytes": nbytes,
                },
                "gemm",
                ("K", "N", "M"),
                kern,
                f"dtype={dtype},",
            )
        )
        kernels[dtype] = kern
    if not parts:
        raise ValueError(
            f"GEMM table has no {' or '.join(GEMM_DTYPES)} rows; found dtypes {sorted(set(df['gemm_dtype']))}"
        )
    return pd.concat(parts, ignore_index=True), kernels


def convert_prefill(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """latsim ``attention`` rows of phase ``prefill`` (one sequence, nothing cached)."""
    sel, kern = _main_kernel(_plain_attention(df))
    if sel.empty:
        raise ValueError("context attention table has no bf16-KV rows without a sliding window")
    keys = ["isl", "num_heads", "num_key_value_heads", "head_dim"]
    sel = sel[sel["batch_size"] == sel.groupby(keys)["batch_size"].transform("min")]
    q = sel["isl"].to_numpy(np.float64)
    hq, hkv, d = (sel[c].to_numpy(np.float64) for c in keys[1:])
    flops, nbytes = attention.work(hq, hkv, d, q, attention.prefill_pairs(q, 0), q)  # type: ignore[arg-type]
    rows = {
        "phase": "prefill",
        "hq": hq,
        "hkv": hkv,
        "d": d,
        "q": q,
        "ctx": np.zeros_like(q),
        "median_s": sel["latency"].to_numpy() * MS / sel["batch_size"].to_numpy(np.float64),
        "flops": flops,
        "bytes": nbytes,
        "kv_tokens": q,
        "max_kv": q,
        "batch": np.nan,
        "mix": None,
    }
    return _frame(rows, "attention", ("hq", "hkv", "d", "q", "ctx"), kern), kern


def convert_decode(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """latsim ``attention`` rows of phase ``decode`` (uniform contexts of ``step + 1`` tokens)."""
    sel, kern = _main_kernel(_plain_attention(df))
    if sel.empty:
        raise ValueError("generation attention table has no bf16-KV rows without a sliding window")
    b = sel["batch_size"].to_numpy(np.float64)
    ctx = sel["step"].to_numpy(np.float64) + 1.0
    hq, hkv, d = (sel[c].to_numpy(np.float64) for c in ("num_heads", "num_key_value_heads", "head_dim"))
    flops, nbytes = attention.work(hq, hkv, d, b, b * ctx, b * ctx)  # type: ignore[arg-type]
    rows = {
        "phase": "decode",
        "hq": hq,
        "hkv": hkv,
        "d": d,
        "q": np.nan,
        "ctx": ctx,
        "median_s": sel["latency"].to_numpy() * MS,
        "flops": flops,
        "bytes": nbytes,
        "kv_tokens": b * ctx,
        "max_kv": ctx,
        "batch": b,
        "mix": "uniform",
    }
    return _frame(rows, "attention", ("hq", "hkv", "d", "batch", "ctx"), kern), kern


def _routing(df: pd.DataFrame) -> str:
    if "distribution" not in df.columns:
        return "unrecorded"
    have = sorted(set(df["distribution"].astype(str)))
    if "balanced" in have:
        return "balanced"
    laws = sorted((float(h.rsplit("_", 1)[1]), h) for h in have if h.startswith("power_law_"))
    if not laws:
        raise ValueError(f"MoE table routing {have} unknown; expected balanced or power_law_<alpha>")
    return laws[0][1]


def convert_moe(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """latsim ``moe`` rows (bf16 experts, one GPU) and what was selected."""
    sel = df[(df["moe_dtype"].astype(str) == "bfloat16") & (df["moe_tp_size"] == 1) & (df["moe_ep_size"] == 1)]
    if sel.empty:
        raise ValueError("MoE table has no bfloat16 rows with moe_tp_size = moe_ep_size = 1")
    routing = _routing(sel)
    if "distribution" in sel.columns:
        sel = sel[sel["distribution"].astype(str) == routing]
    sel, kern = _main_kernel(sel)
    t, e, k, h, i = (
        sel[c].to_numpy(np.float64) for c in ("num_tokens", "num_experts", "topk", "hidden_size", "inter_size")
    )
    flops, nbytes, hit = moe.work(t, e, k, h, i)  # type: ignore[arg-type]
    rows = {
        "tokens": t,
        "experts": e,
        "top_k": k,
        "hidden": h,
        "inter": i,
        "median_s": sel["latency"].to_numpy() * MS,
        "flops": flops,
        "bytes": nbytes,
        "experts_hit": hit,
    }
    return _frame(rows, "moe", ("tokens", "experts", "top_k", "hidden", "inter"), kern), {
        "kernel": kern,
        "routing": routing,
    }


def convert_allreduce(df: pd.DataFrame) -> pd.DataFrame:
    """latsim ``comm`` rows: eager (no mode) and CUDA-graph (``vllm_custom``) all-reduce, bf16."""
    sel = df[df["allreduce_dtype"].astype(str).isin(["bfloat16", "bf16"])]
    if sel.empty:
        raise ValueError("all-reduce table has no bfloat16 rows")
    tag = sel.get("backend", sel.get("kernel_source", pd.Series("", index=sel.index))).astype(str).str.lower()
    mode = np.asarray([("vllm_custom" if "graph" in t else None) for t in tag], dtype=object)
    rows = {
        "world": sel["num_gpus"].to_numpy(np.int64),
        "bytes": sel["message_size"].to_numpy(np.float64) * 2.0,
        "median_s": sel["latency"].to_numpy() * MS,
        "mode": mode,
    }
    out = pd.DataFrame(rows)
    out.insert(
        0,
        "point_id",
        "comm:mode="
        + pd.Series(mode).fillna("eager").to_numpy().astype(str)
        + ",world="
        + out["world"].astype(str)
        + ",bytes="
        + out["bytes"].astype("int64").astype(str),
    )
    out.insert(1, "family", "comm")
    out.insert(2, "status", "ok")
    out["impl"] = np.where(mode == "vllm_custom", "vLLM custom all-reduce (graph)", "vLLM custom all-reduce (eager)")
    return out.drop_duplicates("point_id").reset_index(drop=True)


def subsample(df: pd.DataFrame, cap: int, seed: int = 0) -> pd.DataFrame:
    """At most ``cap`` rows, drawn without replacement with ``seed`` (all rows when fewer)."""
    if len(df) <= cap:
        return df
    return df.sample(n=cap, random_state=seed).sort_values("point_id").reset_index(drop=True)
