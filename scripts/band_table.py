"""Print an error-band file as the README's markdown table.

    python scripts/band_table.py latsim/data/engines/vllm/error_band.json       # the H200's
    python scripts/band_table.py latsim/data/engines/vllm/error_band-h100.json  # the H100's

One row per cell (host speed unknown or given, load, pace): its levels and configurations,
then each statistic's band as ``low..high %`` with the left-out share inside in brackets
(:mod:`latsim.validate.error_band` builds the file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from latsim.validate.error_band import PACE_NAMES

METRICS = ("ttft_ms p50", "ttft_ms p99", "tpot_ms p50", "tpot_ms p99", "e2e_ms p50")
HEADER = ("| host speed | load | pace | levels (configurations) | TTFT p50 | TTFT p99 | TPOT p50 | "
          "TPOT p99 | E2E p50 |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def percent(x: float) -> str:
    """A signed whole percent (``-0`` for a small negative)."""
    v = round(100 * x)
    return f"{v:+d}" if v != 0 else ("-0" if x < 0 else "+0")


def rows(doc: dict[str, Any]) -> list[str]:
    """The table's rows, in the order host speed, load, pace."""
    out = []
    for speed, key in (("unknown (1)", "bands"), ("given", "known_host")):
        for load in ("light", "heavy"):
            for pace in PACE_NAMES:
                cell = doc[key].get(load, {}).get(pace)
                if not cell:
                    continue
                first = cell[METRICS[0]]
                cells = [f"{percent(cell[m]['low'])}..{percent(cell[m]['high'])} % ({round(100 * cell[m]['coverage'])})"
                         for m in METRICS]
                out.append(f"| {speed} | {load} | {pace} | {first['levels']} ({first['configurations']}) | "
                           + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("band", type=Path, help="an error-band file (scripts/error_band.py --write)")
    args = p.parse_args(argv)
    try:
        doc = json.loads(args.band.read_text())
        table = rows(doc)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {args.band}: not an error-band file ({exc})", file=sys.stderr)
        return 2
    print(HEADER)
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
