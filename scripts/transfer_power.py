"""Give an imported profile the H200's power-cap terms, referred to the imported profile's own prices.

The power-cap model (:mod:`latsim.costmodel.power`) is a physical part (the full-clock budget
and its refill, the tensor-rate ramp in TFLOP/s, each quantized class's weight on it) and a part
relative to the profile it describes: each kernel class's time at full clock and at the cap over
the *profile's* price of the same call (``full_clock_ratio`` / ``capped_ratio``, per GEMM class,
and prefill attention's pair), and each quantized class's capped ratio in light steps.  An
imported profile (aiconfigurator's tables, ``latsim calibrate --import``) has no power data, so
it prices every step at the clock its source timed, whatever the load.

This script keeps the physical part of ``MEASURED/power.json`` (the H200's, fitted on
``data/power/h200`` by ``scripts/fit_power.py``) and refits the relative part against the
TARGET profile: the same measured full-clock and capped milliseconds of the same probe runs
(``data/power/h200``'s probe files, through ``fit_power.py``'s own functions), over the TARGET's
regressors' price of each call instead of the measured profile's rows.  Light-step ratios are
moved by the ratio of the two profiles' prices of the class's Llama-3.1-70B layer at
:data:`LIGHT_ROWS` rows (a 512-token prompt beside 64 decoders).

What it assumes, written into the file: the TARGET's GPU runs these compute-bound calls (GEMMs
of at least 2,048 rows, 8,160-token prefill attention) as fast as the H200 does at the same
clock, and its power management brings the same work to the same clock.  On the H200 itself
(the imported ``h200-aic``) that is only the first half, and it is checked end to end by
``scripts/aic_validate.py --imported``; the H100 SXM is the same GH100 chip (132 SMs, 1,980 MHz,
700 W) with slower, smaller HBM3, whose lower memory power under decode is not modelled.

    python scripts/transfer_power.py data/power/h200 --measured latsim/data/calibration/h200 \\
        --to latsim/data/calibration/h100-aic [--write]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

from fit_power import (  # type: ignore[import-not-found]  # scripts/
    CHUNK,
    GATE_UP,
    LAYER,
    class_ratios,
    layer_ratios,
    load_probes,
    quantized_pairs,
    ratio_pairs,
)

from latsim.atomic import atomic_write_text

LIGHT_ROWS = 576
"""Rows of the light step at which the quantized classes' light ratios are moved to the target."""
LIGHT_MODEL = "llama-3.1-70b"
"""The model whose layer prices move the light ratios (the quantized light ratios were measured on it)."""
PREFILL_HEADS = (32, 8, 128)
"""The heads of the prefill probe's FA3 calls (Llama-3.1-8B)."""
ATTENTION_CONTEXTS = (0, 8192, 16384)
"""Context rows of the synthetic attention table (``fit_power.profile_prefill_ms`` reads the row nearest
``k x 8,192`` for a probe context of ``k x 8,160``)."""


class Pricer:
    """One profile's regressors on its own device: GEMM and prefill attention milliseconds."""

    def __init__(self, folder: Path) -> None:
        from latsim.catalog.lookup import load_device
        from latsim.costmodel.profile.regressors import load_predictors

        self.folder = folder
        self.predictors = load_predictors(folder)
        self.device = load_device(str(self.predictors.profile["device"]))

    def gemm_ms(self, dtype: str, k: int, n: int, m: np.ndarray) -> np.ndarray:
        compute, wbytes, w4a16 = class_kernel(dtype)
        return 1e3 * np.asarray(self.predictors.gemm_s(np.asarray(m, dtype=np.float64), k, n, self.device, compute,
                                                       wbytes, w4a16=w4a16))

    def prefill_ms(self, q: float, ctx: np.ndarray) -> np.ndarray:
        ctx = np.asarray(ctx, dtype=np.float64)
        return 1e3 * self.predictors.attn_prefill_s(np.full_like(ctx, q), ctx, PREFILL_HEADS, self.device)

    def layer_ms(self, dtype: str, model_name: str, m: float) -> float:
        """One transformer layer's linear GEMMs at ``m`` rows (TP 1), as the cost model lists them
        (:func:`latsim.costmodel.profile.tabulate.step_gemms`)."""
        from latsim.catalog.lookup import load_model
        from latsim.costmodel.profile.tabulate import step_gemms
        from latsim.costmodel.shard import shard_model

        rows = np.array([m])
        gemms = step_gemms(shard_model(load_model(model_name), 1, dtype))
        return float(sum(1e3 * self.predictors.gemm_s(rows, g.k, g.n, self.device, g.dtype, g.weight_bytes,
                                                      w4a16=g.w4a16)[0] for g in gemms))


def class_kernel(dtype: str) -> tuple[str, float, bool]:
    """(compute dtype, weight bytes, runs the W4A16 kernel) of a power-data GEMM class, as the cost
    model prices the catalog 70B in that weight dtype (:func:`latsim.costmodel.shard.shard_model`)."""
    from latsim.catalog.lookup import load_model
    from latsim.costmodel.shard import shard_model

    s = shard_model(load_model(LIGHT_MODEL), 1, dtype)
    return s.gemm_dtype, s.weight_bytes, s.w4a16


def gemm_calls(power: dict[str, Any], int4: dict[str, Any], shapes: dict[str, Any]) -> set[tuple[str, int, int, int]]:
    """(dtype, K, N, M) of every GEMM the fit reads a profile row for."""
    calls = {("bf16", GATE_UP[0], GATE_UP[1], CHUNK)}
    for r in power["rows"]:
        if "on_ms" in r or "dtype" not in r:
            continue
        k, n = (int(r["K"]), int(r["N"])) if "K" in r else GATE_UP
        calls.add((str(r["dtype"]), k, n, int(r["M"])))
    calls.update(("int4", int(r["K"]), int(r["N"]), int(r["M"])) for r in int4["sustained"])
    calls.update((str(r["dtype"]), int(r["K"]), int(r["N"]), int(r["M"])) for r in shapes["rows"]
                 if r.get("shape") in LAYER)
    return calls


def priced_tables(pricer: Pricer, calls: set[tuple[str, int, int, int]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tables shaped like a calibration folder's ``gemm.parquet`` and ``attention.parquet`` holding
    the target's price (seconds) of every call the fit reads, so that ``fit_power``'s functions,
    which read rows, read the target's regressors."""
    gemm = pd.DataFrame([{"dtype": dt, "K": k, "N": n, "M": m, "status": "ok",
                          "median_s": float(pricer.gemm_ms(dt, k, n, np.array([m]))[0]) / 1e3}
                         for dt, k, n, m in sorted(calls)])
    ctx = np.array(ATTENTION_CONTEXTS, dtype=np.float64)
    hq, hkv, d = PREFILL_HEADS
    attn = pd.DataFrame({"phase": "prefill", "hq": hq, "hkv": hkv, "d": d, "impl": "vllm-fa3-paged", "q": 8192,
                         "status": "ok", "ctx": ctx, "median_s": pricer.prefill_ms(8192.0, ctx) / 1e3})
    return gemm, attn


def transferred(measured: dict[str, Any], probes: dict[str, Any], source: Pricer, target: Pricer) -> dict[str, Any]:
    """``measured`` (a ``power.json``) with its profile-relative ratios refitted against ``target``."""
    gemm, attn = priced_tables(target, gemm_calls(probes["power"], probes["int4"], probes["shapes"]))
    pairs_by_class = ratio_pairs(probes["prefill"], probes["power"], gemm, attn)
    attention = pairs_by_class["attention"]
    gemm_pairs = {**quantized_pairs(probes["power"], probes["int4"], gemm), "bf16": pairs_by_class["bf16"]}
    gemms = class_ratios(gemm_pairs, layer_ratios(probes["shapes"], gemm))
    out = dict(measured)
    out.update(full_clock_ratio=float(np.median([p["full_ms"] / p["profile_ms"] for p in attention])),
               capped_ratio=float(np.median([p["capped_ms"] / p["profile_ms"] for p in attention])),
               pairs=attention, gemms=gemms)
    cap = measured.get("decode_cap")
    if cap:
        moved = {cls: ratio * source.layer_ms(cls, LIGHT_MODEL, LIGHT_ROWS) / target.layer_ms(cls, LIGHT_MODEL,
                                                                                               LIGHT_ROWS)
                 for cls, ratio in cap.get("light_ratios", {}).items()}
        out["decode_cap"] = {**cap, "light_ratios": {k: round(v, 4) for k, v in moved.items()},
                             "light_ratios_measured": cap.get("light_ratios", {})}
    return out


def provenance(measured_path: Path, target: Path, folder: Path) -> dict[str, Any]:
    return {
        "from": str(measured_path),
        "from_sha256": hashlib.sha256(measured_path.read_bytes()).hexdigest(),
        "probes": str(folder),
        "kept": "budget_s, refill, heavy_tokens, the decode cap's ramp, time constant and rate weights: physical, "
                "from the H200's measurements",
        "refitted": "the attention pair's and each GEMM class's full-clock and capped ratios over this profile's "
                    "regressors' price of the probes' calls; the quantized light-step ratios moved by the two "
                    f"profiles' prices of the {LIGHT_MODEL} layer at {LIGHT_ROWS} rows",
        "assumes": "this profile's GPU runs the probes' compute-bound calls (GEMMs of 2,048+ rows, 8,160-token "
                   "prefill attention) as fast as the H200 at the same clock, and its power management brings "
                   "the same work to the same clock (the H100 SXM: the same GH100 chip, 132 SMs, 1,980 MHz, 700 W; "
                   "its HBM3's lower power under decode is not modelled)",
        "command": f"python scripts/transfer_power.py {folder} --measured {measured_path.parent} --to {target} "
                   "--write",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="the power probes (data/power/h200)")
    ap.add_argument("--measured", type=Path, default=Path("latsim/data/calibration/h200"),
                    help="the profile whose power.json was fitted on those probes")
    ap.add_argument("--to", type=Path, required=True, help="the imported profile to give a power.json")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    measured_path = args.measured / "power.json"
    for path in (measured_path, args.to / "profile.json"):
        if not path.is_file():
            print(f"error: {path} not found", file=sys.stderr)
            return 2
    if args.to.resolve() == args.measured.resolve():
        print("error: --to is the measured profile; its power.json is fitted by scripts/fit_power.py", file=sys.stderr)
        return 2
    measured = json.loads(measured_path.read_text())
    result = transferred(measured, load_probes(args.folder), Pricer(args.measured), Pricer(args.to))
    result["transferred"] = provenance(measured_path, args.to, args.folder)
    summary = {"attention": [result["full_clock_ratio"], result["capped_ratio"]],
               **{cls: [g["full_clock_ratio"], g["capped_ratio"]] for cls, g in result["gemms"].items()},
               "light_ratios": (result.get("decode_cap") or {}).get("light_ratios")}
    print(json.dumps(summary, indent=1))
    if args.write:
        atomic_write_text(args.to / "power.json", json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.to / 'power.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
