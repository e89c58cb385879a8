"""Fit the shipped surrogate from the recipe's simulated rows, score it, write it with its card.

``python -m latsim.predict.train build/surrogate/train [build/surrogate/train2 ...] --out
latsim/data/surrogate --live data/validation`` reads every part the recipe wrote into each
folder (:mod:`latsim.predict.recipe`; the points of every folder need distinct ids),
scores held-out error three ways (:mod:`latsim.predict.heldout`) and against the live runs
(:mod:`latsim.predict.live`), fits the final surrogate on every row and writes the boosters,
``surrogate.json`` (with the card) and ``CARD.md``.  ``--train-only FOLDER ...``: rows of a
sample concentrated where the error is (models/recipe/README.md) that join every training fold
and the final fit but are never held out, so the card scores the space-filling samples alone.
"""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from latsim.atomic import atomic_write_text
from latsim.predict.features import features_at, static_features
from latsim.predict.recipe import TARGETS, read_results
from latsim.predict.surrogate import STABILITY_TREES, TARGET_TREES, TREES

FIT = {**TREES, "target_trees": TARGET_TREES}
"""The shipped fit's settings (:func:`latsim.predict.surrogate.fit_surrogate`), held-out and final alike."""

SPLITS = ("configuration", "model_family", "gpu")


def usable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows whose every request was served or left unfinished (a run the memory plan rejected
    wholesale has no latency to learn)."""
    return frame[frame["num_rejected"] < frame["num_requests"]].reset_index(drop=True)


def simulator_commit() -> str:
    """``git describe`` of the checkout the simulator runs from (``+dirty`` when it has edits)."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "../sim", "../engines", "../costmodel"],
                               cwd=here, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def read_all(folders: Sequence[str]) -> pd.DataFrame:
    """The usable rows of every recipe output folder, sorted by id; ValueError when two folders
    hold the same id (two samples of one seed)."""
    frame = pd.concat([usable(read_results(f)) for f in folders]).sort_values("id").reset_index(drop=True)
    check_distinct_ids(frame, folders)
    return frame


def check_distinct_ids(frame: pd.DataFrame, folders: Sequence[str]) -> None:
    """ValueError when two rows of ``frame`` (read from ``folders``) share a point id."""
    dup = frame["id"][frame["id"].duplicated()]
    if len(dup):
        raise ValueError(f"point id {int(dup.iloc[0])} appears in more than one of {', '.join(folders)}: "
                         "each folder must simulate another design sample (--seed)")


def design_text(frame: pd.DataFrame) -> str:
    """Which design samples the rows come from (a point's simulation seed is ``design seed x
    100003 + its index``, :func:`latsim.predict.design.sample`)."""
    seeds = sorted({int(s) // 100003 for s in frame["seed"]})
    return (f"scrambled Sobol sample{'s' if len(seeds) > 1 else ''} of seed{'s' if len(seeds) > 1 else ''} "
            f"{', '.join(map(str, seeds))} (models/recipe/points*.csv, latsim.predict.design)")


def build_card(frame: pd.DataFrame, static: pd.DataFrame, live: dict | None,
               extra: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> dict:
    """The held-out errors under every split, the live comparison, the domain and provenance;
    ``extra``: training-only rows and their static features (:func:`latsim.predict.heldout.cross_predict`)."""
    from latsim.predict.heldout import cross_predict, score

    feats = features_at(static, frame["qps"].to_numpy(dtype=float))

    card: dict = {"trained_utc": datetime.now(UTC).isoformat(timespec="seconds"),
                  "simulator_commit": simulator_commit(), "sample_size": len(frame),
                  "num_requests_per_configuration": int(frame["num_requests"].iloc[0]),
                  "design": design_text(frame),
                  "trees": TREES, "target_trees": TARGET_TREES, "stability_trees": STABILITY_TREES,
                  "stable_share": float(frame["stable"].mean()),
                  "held_out": {}}
    if extra is not None:
        card["train_only"] = {"size": len(extra[0]), "design": design_text(extra[0])}
    for split in SPLITS:
        card["held_out"][split] = score(frame, feats, cross_predict(frame, static, split, extra, **FIT))
        print(f"held out by {split}: " + ", ".join(
            f"{t} {card['held_out'][split][t]['median']:.3f}" for t in TARGETS), flush=True)
    if live is not None:
        card["live"] = live
    return card


def noise_card(frame: pd.DataFrame, repeat: pd.DataFrame) -> dict:
    """Run-to-run noise of the targets: median and P90 of ``|a / b - 1|`` between two runs of the
    same configurations with different seeds (``frame`` and ``repeat``), over every pair and over
    the pairs both runs found stable, and how often the two runs' stability verdicts agree."""
    a = frame.set_index("id")
    b = usable(repeat).set_index("id")
    ids = a.index.intersection(b.index)
    a, b = a.loc[ids], b.loc[ids]
    both = (a["stable"] & b["stable"]).to_numpy(dtype=bool)
    out: dict = {"pairs": len(ids), "stable_agreement": float((a["stable"] == b["stable"]).mean())}
    for target in TARGETS:
        x, y = a[target].to_numpy(dtype=float), b[target].to_numpy(dtype=float)
        ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
        rel = np.abs(x[ok] / y[ok] - 1.0)
        out[target] = {"median": float(np.median(rel)), "p90": float(np.quantile(rel, 0.9)),
                       "median_stable": float(np.median(rel[both[ok]]))}
    return out


def live_card(root: Path, surrogate) -> dict:
    """Surrogate and simulator errors against the measured runs under ``root``."""
    from latsim.predict.live import live_errors, live_rows, simulate_rows

    rows = live_rows(root)
    by_surrogate = surrogate.predict(rows)
    by_simulator = simulate_rows(rows)
    return {"runs": len(rows), "root": str(root), "surrogate": live_errors(rows, by_surrogate),
            "simulator": live_errors(rows, by_simulator),
            "surrogate_in_domain": int(by_surrogate["in_domain"].sum())}


def main(argv: Sequence[str] | None = None) -> None:
    from latsim.predict.card import write_card_markdown
    from latsim.predict.surrogate import fit_surrogate, save

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="the recipe's output folders (one per design sample)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--live", default=None, help="data/validation: also score against the live runs")
    parser.add_argument("--repeat", default=None,
                        help="the recipe's rows of the same points with other seeds (--seed-offset): the noise floor")
    parser.add_argument("--train-only", nargs="+", default=[], metavar="FOLDER",
                        help="recipe output folders whose rows only train (never held out nor scored)")
    args = parser.parse_args(argv)
    frame = read_all(args.results)
    extra_frame = read_all(args.train_only) if args.train_only else None
    if extra_frame is not None:
        check_distinct_ids(pd.concat([frame, extra_frame]), [*args.results, *args.train_only])
    static = static_features(frame)
    extra = (extra_frame, static_features(extra_frame)) if extra_frame is not None else None
    fit_frame = pd.concat([frame, extra[0]], ignore_index=True) if extra else frame
    fit_static = pd.concat([static, extra[1]], ignore_index=True) if extra else static
    surrogate = fit_surrogate(fit_frame, features_at(fit_static, fit_frame["qps"].to_numpy(dtype=float)), **FIT)
    live = live_card(Path(args.live), surrogate) if args.live else None
    surrogate.card = build_card(frame, static, live, extra)
    surrogate.card["domain"] = surrogate.domain
    if args.repeat:
        surrogate.card["noise"] = noise_card(frame, read_results(args.repeat))
    save(surrogate, args.out)
    atomic_write_text(Path(args.out) / "CARD.md", write_card_markdown(surrogate.card))
    size = sum(p.stat().st_size for p in Path(args.out).iterdir())
    print(f"{args.out}: {len(frame)} configurations, {size / 2**20:.2f} MiB; stable share "
          f"{np.mean(frame['stable']):.2f}")


if __name__ == "__main__":
    main()
