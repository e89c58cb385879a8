"""Op-family agreement: the imported H200 profile against latsim's own H200 measurements.

For every row latsim measured on its H200 (``latsim/data/calibration/h200``, timer floor
removed as the fit does), the imported profile's regressors (``h200-aic``, fitted on
aiconfigurator's H200 tables) predict the time; the table gives per family the median signed
and absolute difference in percent, next to the native regressor's own error on the same
rows (what "agreement" can be at best).  Where the two tables hold the same shape, the
measurements are also compared directly (``exact``).  The bf16 GEMMs of large layers are also
given by row count and timer (:func:`gemm_by_rows`): it is how the native rows of exactly 512
tokens, the CUDA-graph size, were found to read about 14 % over the imported ones while every
other row count agrees within a few percent (``data/power/README.md``).  All-reduce: latsim's eager NCCL table vs
the imported eager custom all-reduce, per world size and message size present in both.

    PYTHONPATH=. python scripts/aic_crosscheck.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.calibration.fit import family_roofline, fit_frames
from latsim.catalog import load_device
from latsim.costmodel.profile.floor import without_floor
from latsim.costmodel.profile.regressors import load_predictors
from latsim.costmodel.profile.store import SHIPPED_DIR, read_json

FAMILIES = ("gemm", "attn_prefill", "attn_decode", "moe")
EXACT_KEYS = {
    "gemm": ("dtype", "M", "K", "N"),
    "attn_prefill": ("hq", "hkv", "d", "q", "ctx"),
    "attn_decode": ("hq", "hkv", "d", "batch", "ctx"),
    "moe": ("tokens", "experts", "top_k", "hidden", "inter"),
}


def _pct(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    return 100.0 * (pred - true) / true


def native_frames(folder: Path) -> dict[str, pd.DataFrame]:
    floor = float(read_json(folder / "overheads.json", "overheads").get("graph_base_s", 0.0))
    frames = {f: without_floor(df, floor) for f, df in fit_frames(folder).items() if f in FAMILIES}
    frames["attn_decode"] = frames["attn_decode"][frames["attn_decode"]["mix"] == "uniform"].reset_index(drop=True)
    return frames


def predicted(folder: Path, family: str, df: pd.DataFrame) -> np.ndarray:
    device = load_device("h200")
    roof = family_roofline(family, df, device)
    return np.asarray(roof * load_predictors(folder).ratio(family, df, roof), dtype=np.float64)


def exact(native: pd.DataFrame, imported: pd.DataFrame, family: str) -> tuple[int, float | None]:
    keys = list(EXACT_KEYS[family])
    both = native.merge(imported[[*keys, "median_s"]], on=keys, suffixes=("", "_aic"))
    if both.empty:
        return 0, None
    return len(both), float(np.median(_pct(both["median_s_aic"].to_numpy(), both["median_s"].to_numpy())))


def family_rows(native_dir: Path, aic_dir: Path) -> list[dict[str, object]]:
    nat, aic = native_frames(native_dir), fit_frames(aic_dir)
    rows = []
    parts = [("gemm bf16", "gemm", nat["gemm"]["fp8"] == 0), ("gemm fp8", "gemm", nat["gemm"]["fp8"] > 0)]
    pre = nat["attn_prefill"]
    parts += [("attn_prefill, empty cache", "attn_prefill", pre["ctx"] == 0),
              ("attn_prefill, after a cached prefix", "attn_prefill", pre["ctx"] > 0)]
    parts += [(f, f, pd.Series(True, index=nat[f].index)) for f in FAMILIES[2:]]
    for name, fam, keep in parts:
        df = nat[fam][keep].reset_index(drop=True)
        true = df["median_s"].to_numpy(np.float64)
        d_aic, d_nat = _pct(predicted(aic_dir, fam, df), true), _pct(predicted(native_dir, fam, df), true)
        n_ex, ex = exact(df, aic[fam], fam) if fam in aic else (0, None)
        rows.append(
            {
                "family": name,
                "rows": len(df),
                "median_signed_pct": float(np.median(d_aic)),
                "median_abs_pct": float(np.median(np.abs(d_aic))),
                "p90_abs_pct": float(np.percentile(np.abs(d_aic), 90)),
                "native_model_median_abs_pct": float(np.median(np.abs(d_nat))),
                "exact_shapes": n_ex,
                "exact_median_signed_pct": ex,
            }
        )
    return rows


M_EDGES = (0, 32, 64, 128, 256, 384, 511, 512, 768, 1024, 2048, 4096, 1 << 20)
"""Row-count bins of :func:`gemm_by_rows` (``(511, 512]`` is the CUDA-graph size alone)."""


def gemm_by_rows(native_dir: Path, aic_dir: Path, min_weights: float = 4096.0 * 4096.0) -> list[dict[str, object]]:
    """The bf16 GEMM rows of layers of at least ``min_weights`` weights, by row count (:data:`M_EDGES`)
    and timer: the imported regressors against the native measurements, median signed percent."""
    df = native_frames(native_dir)["gemm"]
    df = df[(df["fp8"] == 0) & (df["K"] * df["N"] >= min_weights)].reset_index(drop=True)
    d_aic = _pct(predicted(aic_dir, "gemm", df), df["median_s"].to_numpy(np.float64))
    bins = pd.cut(df["M"], list(M_EDGES))
    timer = df["timer"].fillna("-") if "timer" in df else pd.Series("-", index=df.index)
    rows = []
    for (span, how), idx in df.groupby([bins, timer], observed=True).groups.items():
        d = d_aic[np.asarray(list(idx))]
        low, high = int(span.left) + 1, int(span.right)
        rows.append({"rows (M)": str(high) if low == high else f"{low}-{high}", "timer": str(how), "shapes": len(d),
                     "median_signed_pct": float(np.median(d)), "p25_pct": float(np.percentile(d, 25)),
                     "p75_pct": float(np.percentile(d, 75))})
    return rows


def allreduce_rows(native_dir: Path, aic_dir: Path) -> list[dict[str, object]]:
    nat = read_json(native_dir / "allreduce.json", "all-reduce")["worlds"]
    aic = read_json(aic_dir / "allreduce.json", "all-reduce")["worlds"]
    rows = []
    for world in sorted(set(nat) & set(aic)):
        a, b = pd.DataFrame(nat[world]), pd.DataFrame(aic[world])
        both = a.merge(b, on="bytes", suffixes=("_nccl", "_aic"))
        d = _pct(both["seconds_aic"].to_numpy(), both["seconds_nccl"].to_numpy())
        rows.append(
            {
                "family": f"allreduce world {world}",
                "sizes": len(both),
                "median_signed_pct": float(np.median(d)),
                "small_msgs_signed_pct": float(np.median(d[both["bytes"] <= 1 << 20])),
                "large_msgs_signed_pct": float(np.median(d[both["bytes"] >= 1 << 24])),
            }
        )
    return rows


def markdown(rows: list[dict[str, object]]) -> str:
    """A markdown table of ``rows`` (floats to one decimal, None as -)."""
    cols = list(rows[0])
    cell = lambda v: "-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--native", type=Path, default=SHIPPED_DIR / "h200")
    ap.add_argument("--imported", type=Path, default=SHIPPED_DIR / "h200-aic")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    fam, ar = family_rows(args.native, args.imported), allreduce_rows(args.native, args.imported)
    by_rows = gemm_by_rows(args.native, args.imported)
    print(markdown(fam))
    print()
    print(markdown(by_rows))
    print()
    print(markdown(ar))
    if args.json:
        args.json.write_text(json.dumps({"families": fam, "gemm_bf16_by_rows": by_rows, "allreduce": ar}, indent=1)
                             + "\n")


if __name__ == "__main__":
    main()
