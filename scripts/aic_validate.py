"""The live H200 runs replayed with the imported H200 profile against the native one.

Each run under ``RUNS`` (default ``data/validation/h200``) is replayed twice, the GPU priced
by latsim's own H200 profile and by the one imported from aiconfigurator's H200 tables
(``latsim validate --profile``); host terms, seeds and everything else are the same.  Prints
per run group and for all Poisson levels the median |error| of TTFT, TPOT and E2E p50/p99
for both, and the difference in points: what an imported profile costs end to end.

    PYTHONPATH=. python scripts/aic_validate.py [RUNS] [--imported DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from latsim.costmodel.profile.store import SHIPPED_DIR
from latsim.validate.compare import compare_run, error_table, find_runs, headline


def table(runs: list[Path], profile: Path | None) -> pd.DataFrame:
    return error_table([compare_run(r, "h200", seed=0, profile=profile) for r in runs])


def heads(errors: pd.DataFrame) -> pd.DataFrame:
    """Median |error| (percent) per metric and statistic: over all runs and per run group."""
    group = errors["run"].map(lambda r: Path(r).parent.name)
    groups = {"all": errors, **{str(k): g for k, g in errors.groupby(group)}}
    rows = {}
    for name, g in groups.items():
        h = 100.0 * headline(g)
        rows[name] = {f"{m} {s}": h.loc[m, s] for m in h.index for s in h.columns}
    return pd.DataFrame(rows).T


def signed_medians(errors: pd.DataFrame) -> pd.Series:
    """Median signed error (percent) per metric and statistic over the Poisson levels."""
    t = errors[errors["level"] != "burst"]
    med = 100.0 * t.groupby(["metric", "stat"])["error"].median()
    return pd.Series({f"{m} {s}": v for (m, s), v in med.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="?", default=Path("data/validation/h200"))
    ap.add_argument("--imported", type=Path, default=SHIPPED_DIR / "h200-aic")
    args = ap.parse_args()
    runs = find_runs(args.runs, "h200")
    nat_t, imp_t = table(runs, None), table(runs, args.imported)
    native, imported = heads(nat_t), heads(imp_t)
    signed = pd.DataFrame({"native": signed_medians(nat_t), "imported": signed_medians(imp_t)}).T
    print("### median signed error %, all Poisson levels (positive: predicted slower)")
    print(signed.round(1).to_string())
    print()
    for name, frame in (("native H200 profile", native), ("imported H200 profile", imported),
                        ("imported - native (points)", imported - native)):
        print(f"### {name}: median |error| %, Poisson levels")
        print(frame.round(1).to_string())
        print()


if __name__ == "__main__":
    main()
