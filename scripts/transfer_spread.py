"""Give imported profiles the H200's decode-spread table where their decode call is the same kernel.

    python scripts/transfer_spread.py latsim/data/calibration/{a100,b200,h100-aic,l40s,h200-aic}

``latsim calibrate --import`` does this for a new import
(:func:`latsim.calibration.aic_import.transfer_spread`); this applies it to folders imported
before the table existed, without importing them again: ``decode_spread.json`` is written (or
removed) and ``profile.json``'s ``not_measured`` gets its ``decode_spread`` line; nothing else in
the folder changes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from latsim.atomic import atomic_write_text
from latsim.calibration.aic_import import transfer_spread
from latsim.costmodel.profile.store import PROFILE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    for folder in ap.parse_args().folders:
        path = folder / PROFILE
        profile = json.loads(path.read_text())
        if (profile.get("source") or {}).get("kind") != "imported":
            raise SystemExit(f"{folder}: not an imported profile (its own spread table comes from the skew probe)")
        profile.setdefault("not_measured", {})["decode_spread"] = transfer_spread(folder, profile)
        atomic_write_text(path, json.dumps(profile, indent=1, default=str) + "\n")
        print(f"{folder}: {profile['not_measured']['decode_spread']}")


if __name__ == "__main__":
    main()
