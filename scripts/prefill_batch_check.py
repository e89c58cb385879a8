"""Check the prices of several prompt chunks in one attention call against a batch probe's times.

    python scripts/prefill_batch_check.py PROBE.json [--device h100]

``PROBE.json`` is ``scripts/device_prefill_batch_probe.py``'s output: per head shape, chunk size
``q``, cached context ``ctx`` and count ``n``, one call over ``n`` chunks (``batched_us``) and one
chunk alone (``alone_us``).  For every row this prints, beside the measured batched call:

* ``sum``: ``n`` times the measured lone chunk, which is how the cost model prices the step
  today (``CalibratedCostModel._prefill_layers``: the summed roofline times one chunk's ratio);
* ``priced``: the same from the device's profile (``n`` x the regressor's one-chunk price), so
  the regressor's own error is apart from the batching question;
* ``heads``: the profile's price of one chunk with ``n`` times the heads (the same thread blocks
  FA3 launches for ``n`` chunks), the candidate rule tried on the replay in the fifty-sixth session
  (``docs/validation.md``, "Prompt throughput in the bursts").

and, per head shape and count, the median of each over the measured call: the rule to ship is
the one whose medians sit at 1.00 across shapes and counts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.catalog.lookup import load_device
from latsim.costmodel.profile.regressors import Predictors, load_predictors
from latsim.costmodel.profile.store import has_profile

COLUMNS = ("shape", "hq", "hkv", "d", "q", "ctx", "n", "alone_us", "batched_us")


def read_probe(path: Path) -> pd.DataFrame:
    """The probe's rows; ValueError naming what is missing when the file is not a batch probe's."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON file ({exc})") from None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not rows:
        raise ValueError(f"{path}: no 'rows' (expected scripts/device_prefill_batch_probe.py's output)")
    frame = pd.DataFrame(rows)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: rows lack {', '.join(missing)}")
    return frame


def one_call_us(pred: Predictors, device, q: float, ctx: float, heads: tuple[int, int, int]) -> float:
    """The profile's price of one chunk of ``q`` tokens after ``ctx`` under ``heads``, in us."""
    t = pred.attn_prefill_s(np.array([q], dtype=float), np.array([ctx], dtype=float), heads, device)
    return 1e6 * float(t[0])


def prices(frame: pd.DataFrame, pred: Predictors, device) -> pd.DataFrame:
    """``frame`` with the three prices (us) and each over the measured batched call."""
    out = frame.copy()
    out["sum_us"] = out["n"] * out["alone_us"]
    out["priced_us"] = [r.n * one_call_us(pred, device, r.q, r.ctx, (int(r.hq), int(r.hkv), int(r.d)))
                        for r in out.itertuples()]
    out["heads_us"] = [one_call_us(pred, device, r.q, r.ctx, (int(r.n * r.hq), int(r.n * r.hkv), int(r.d)))
                       for r in out.itertuples()]
    for name in ("sum", "priced", "heads"):
        out[f"{name}_ratio"] = out[f"{name}_us"] / out["batched_us"]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe", type=Path)
    ap.add_argument("--device", default="h100", help="the GPU whose profile prices the rows (the probe's GPU)")
    args = ap.parse_args(argv)
    try:
        frame = read_probe(args.probe)
        device = load_device(args.device)
    except ValueError as exc:
        ap.error(str(exc))
    profile = has_profile(device.name, device.aliases)
    if profile is None:
        ap.error(f"--device {args.device!r}: no shipped calibration profile to price the rows with")
    table = prices(frame, load_predictors(profile), device)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        shown = ["shape", "q", "ctx", "n", "batched_us", "sum_us", "priced_us", "heads_us"]
        print(table[shown].round(1).to_string(index=False))
        print("\nmedian price / measured per shape and count (1.00: the rule prices the batched call):")
        print(table.groupby(["shape", "n"])[["sum_ratio", "priced_ratio", "heads_ratio"]].median().round(3).to_string())


if __name__ == "__main__":
    sys.exit(main())
