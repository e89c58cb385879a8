"""The measured uncertainty of pricing a GPU without its own kernel measurements.

``latsim/data/calibration/transfer_error.json`` is written by ``scripts/aic_transfer.py``:
leave one GPU out of the imported profiles, predict its kernels from the others and its
datasheet, and record the error per op family.  :func:`transfer_uncertainty` reads its summary
for ``compare`` and reports: per family, the median over held-out GPUs of the median absolute
percentage error, and the worst GPU's.
"""

from __future__ import annotations

from pathlib import Path

from latsim.costmodel.profile.store import SHIPPED_DIR, read_json

TRANSFER_FILE = SHIPPED_DIR / "transfer_error.json"


def transfer_uncertainty(path: Path = TRANSFER_FILE) -> dict[str, dict[str, float]]:
    """``{family: {"median_ape_pct", "worst_ape_pct"}}``; ValueError naming the file when unusable."""
    doc = read_json(path, "transfer-error table (run scripts/aic_transfer.py)")
    summary = doc.get("summary")
    if not isinstance(summary, dict) or not summary:
        raise ValueError(f"{path}: expected a non-empty 'summary' object of op families")
    out = {}
    for family, row in summary.items():
        try:
            out[family] = {k: float(row[k]) for k in ("median_ape_pct", "worst_ape_pct")}
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: family {family!r} lacks median_ape_pct/worst_ape_pct numbers") from None
    return out
