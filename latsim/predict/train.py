"""Fit the shipped surrogate from the recipe's simulated rows, score it, write it with its card.

``python -m latsim.predict.train build/surrogate/train --out latsim/data/surrogate
--live data/validation`` reads every part the recipe wrote (:mod:`latsim.predict.recipe`),
scores held-out error three ways (:mod:`latsim.predict.heldout`) and against the live runs
(:mod:`latsim.predict.live`), fits the final surrogate on every row and writes the boosters,
``surrogate.json`` (with the card) and ``CARD.md``.
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
from latsim.predict.features import features
from latsim.predict.recipe import TARGETS, read_results

SPLITS = ("configuration", "model_family", "gpu")
TREES = {"n_estimators": 100, "max_depth": 4}


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


def build_card(frame: pd.DataFrame, feats: pd.DataFrame, live: dict | None) -> dict:
    """The held-out errors under every split, the live comparison, the domain and provenance."""
    from latsim.predict.heldout import cross_predict, score

    card: dict = {"trained_utc": datetime.now(UTC).isoformat(timespec="seconds"),
                  "simulator_commit": simulator_commit(), "sample_size": len(frame),
                  "num_requests_per_configuration": int(frame["num_requests"].iloc[0]),
                  "design": "models/recipe/points.csv (scrambled Sobol, latsim.predict.design)",
                  "trees": TREES, "stable_share": float(frame["stable"].mean()), "held_out": {}}
    for split in SPLITS:
        card["held_out"][split] = score(frame, feats, cross_predict(frame, feats, split, **TREES))
        print(f"held out by {split}: " + ", ".join(
            f"{t} {card['held_out'][split][t]['median']:.3f}" for t in TARGETS), flush=True)
    if live is not None:
        card["live"] = live
    return card


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
    parser.add_argument("results")
    parser.add_argument("--out", required=True)
    parser.add_argument("--live", default=None, help="data/validation: also score against the live runs")
    args = parser.parse_args(argv)
    frame = usable(read_results(args.results))
    feats = features(frame)
    surrogate = fit_surrogate(frame, feats, **TREES)
    live = live_card(Path(args.live), surrogate) if args.live else None
    surrogate.card = build_card(frame, feats, live)
    surrogate.card["domain"] = surrogate.domain
    save(surrogate, args.out)
    atomic_write_text(Path(args.out) / "CARD.md", write_card_markdown(surrogate.card))
    size = sum(p.stat().st_size for p in Path(args.out).iterdir())
    print(f"{args.out}: {len(frame)} configurations, {size / 2**20:.2f} MiB; stable share "
          f"{np.mean(frame['stable']):.2f}")


if __name__ == "__main__":
    main()
