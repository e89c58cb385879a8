"""Set the host the engine's CPU terms describe to the typical host of the live runs.

    python scripts/host_reference.py [ROOT ...] [--write]

Every live level measured with the host probe (``latsim.measure.hostprobe``) records the
median time of the probe's fixed workload while it ran (``host_probe_ms``).  On the lent H200
virtual machine that time moves by up to 2x between engine starts, so a prediction made for the
host the CPU terms were first measured on (a fast state) is too fast on the host most runs saw.

The script prints the probe's distribution over the probed levels under each ROOT (default
``data/validation``): count, run folders (the levels' parents), 10th / 50th / 90th
percentiles.  ``--write`` makes the median the engine's ``host_reference_probe_s`` in the
host-terms file (``--yaml``), keeps the 10th and 90th percentiles beside it (the host speeds a
prediction's sensitivity reports, :func:`latsim.engines.vllm.host_terms.typical_host_speeds`),
and re-expresses every CPU term
(:data:`latsim.costmodel.host.SPEED_FIELDS`) of every entry that holds them in that host's
units: each multiplied by new reference / old reference (a host whose probe takes longer
spends proportionally longer on the same CPU work, :meth:`HostOverhead.at_speed`).  Run again,
it finds the reference in place and leaves the file alone.  ``host_speed`` 1 then means the
typical host, and ``latsim host-speed`` / ``--host-speed probe`` measure against it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from latsim.costmodel.host import SPEED_FIELDS
from latsim.engines.vllm import host_write
from latsim.engines.vllm.host_terms import HOST_TERMS_KEY
from latsim.measure.records import read_meta
from latsim.provenance import combined_digest, display_path, round_decimals, round_significant, significant
from latsim.validate.compare import find_runs, host_probe_ms

DECIMALS = 5
"""Decimal places of the written reference (10 us, as ``scripts/host_steps.py`` writes it)."""
TERM_DIGITS = 4
"""Significant digits each rescaled term keeps."""


def probed_levels(roots: list[Path]) -> list[tuple[Path, float]]:
    """(level folder, probe median in seconds) of every level under ``roots`` that ran the probe."""
    out = []
    for root in roots:
        for level in find_runs(root, "h200"):  # the H200 machine's CPU (another VM's differs)
            probe = host_probe_ms(read_meta(level))
            if probe is not None:
                out.append((level, probe / 1e3))
    return out


def summary(levels: list[tuple[Path, float]]) -> dict[str, float]:
    """Count, run folders and the 10th / 50th / 90th percentile of the probe (seconds)."""
    probes = np.array([p for _, p in levels])
    p10, p50, p90 = np.percentile(probes, [10, 50, 90])
    return {"levels": len(levels), "run_folders": len({level.parent for level, _ in levels}),
            "p10_s": float(p10), "median_s": float(p50), "p90_s": float(p90)}


def rescaled(entry: dict, factor: float) -> dict[str, float]:
    """The CPU terms ``entry`` holds, multiplied by ``factor`` (to :data:`TERM_DIGITS`)."""
    return {name: round_significant(float(entry[name]) * factor, TERM_DIGITS) for name in SPEED_FIELDS if name in entry}


def write(args: argparse.Namespace, levels: list[tuple[Path, float]], stats: dict[str, float]) -> None:
    """Make the median the reference, rescale every entry's CPU terms (see the module doc) and
    record the probe's spread (``host_probe_p10_s`` / ``host_probe_p90_s``)."""
    data = host_write.read(args.yaml)
    engine = data.get("engines", {}).get(HOST_TERMS_KEY, {})
    old = float(engine.get("host_reference_probe_s", 0.0))
    new = round_decimals(stats["median_s"], DECIMALS)
    if old <= 0.0:
        raise SystemExit(f"{display_path(args.yaml)}: no host_reference_probe_s to rescale from")
    inputs = {"roots": [str(r) for r in args.roots], "levels": {"count": len(levels),
              "digest": combined_digest(level for level, _ in levels)}, "decimals": DECIMALS}
    results = significant({**stats, "old_reference_s": old, "new_reference_s": new, "factor": new / old}, 6)
    if old != new:
        for name, entry in engine.items():
            terms = rescaled(entry, new / old) if isinstance(entry, dict) else {}
            if terms:
                host_write.write_or_exit(args.yaml, terms, inputs, {**results, "from": {k: entry[k] for k in terms}},
                                         script="host_reference", entry=name)
    spread = {"host_reference_probe_s": new, "host_probe_p10_s": round_decimals(stats["p10_s"], DECIMALS),
              "host_probe_p90_s": round_decimals(stats["p90_s"], DECIMALS)}
    if old == new:  # the terms are already in this host's units: keep the record of their rescaling
        previous = (engine.get("provenance") or {}).get("host_reference")
        results = previous["results"] if previous else results
    host_write.write_or_exit(args.yaml, spread, inputs, results, script="host_reference", entry=None,
                             supersedes=("host_steps",))  # its --against once wrote the reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="*", type=Path, default=[Path("data/validation")])
    ap.add_argument("--yaml", type=Path, default=host_write.shipped_path(), help="the host-terms file")
    ap.add_argument("--write", action="store_true", help="make the median the reference, rescale the CPU terms")
    args = ap.parse_args()
    missing = [str(r) for r in args.roots if not r.is_dir()]
    if missing:
        ap.error(f"not a folder: {', '.join(missing)}")
    levels = probed_levels(args.roots)
    if not levels:
        raise SystemExit(f"no level under {', '.join(map(str, args.roots))} ran the host probe")
    stats = summary(levels)
    print(f"{stats['levels']} probed levels, {stats['run_folders']} run folders: probe p10 "
          f"{stats['p10_s'] * 1e3:.2f} ms, median {stats['median_s'] * 1e3:.2f} ms, p90 {stats['p90_s'] * 1e3:.2f} ms")
    if args.write:
        write(args, levels, stats)


if __name__ == "__main__":
    main()
