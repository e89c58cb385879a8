"""Measure the engine's host time per decode step against batch size from a concurrency sweep.

    python scripts/host_steps.py data/host/h200/llama-3.2-1b-fixed-in32-out256

A sweep (``scripts/device_measure.py --concurrency-sweep ...``) holds one closed-loop level per
concurrency ``c`` (``c0064/``: 64 requests in flight).  With fixed lengths the requests of a
level start, decode and finish together, so nearly every step is a pure decode of ``c``
sequences; the median of a request's inter-token gaps is then the decode step.  Per level the
script prints the median over requests of that median; then the least-squares line
``step_s + seq_s x c`` over the levels with ``c >= --min-concurrency``.  On a model small
enough that the GPU finishes first (Llama-3.2-1B on an H200), the line is the host time of a
step: scheduling, preparing inputs and processing outputs.

``--against OTHER`` compares this sweep with another of the same engine and model (the one
the shipped host terms come from, say): per level with ``c >= --host-bound-from`` (where the
host, not the GPU, sets the step), the step ratio here / there, this level's host-probe median
(``latsim.validate.compare.host_probe_ms``), and ``probe / ratio``: the probe time at
which this host would have run at the other sweep's speed, if the step scales with the probe.
Their median (pooled over every sweep given) is the other sweep's host in probe terms.

``--write`` puts the line into the host-terms file (``--yaml``, default the shipped
``latsim/data/engines/vllm/host.yaml``) with its provenance: ``step_s`` and ``seq_s`` (to 1 us
and 0.01 us, the precision printed) into the ``calibrated`` entry, in the units of the file's
reference host (``host_reference_probe_s``, ``scripts/host_reference.py``): the sweep's host
ran at ``--host-speed`` times it (a number, e.g. the reference over the probe time ``--against``
found for a sweep without the probe; or ``probe``: the median over the sweep's levels of
:func:`latsim.validate.compare.run_host_speed`), so the line is multiplied by that speed.
``--against`` only prints.  The file is left alone when nothing but the command, commit or
date would change.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from latsim.engines.vllm import host_write
from latsim.measure.records import load_run, read_meta
from latsim.provenance import display_path, record, round_decimals, run_inputs, significant
from latsim.validate.compare import host_probe_ms, host_speed_option, run_host_speed

DECIMALS = {"step_s": 6, "seq_s": 8}
"""Decimal places each written term keeps (seconds): the precision the script prints."""


def decode_step_s(level: Path) -> float:
    """Median over the level's completed requests of their median inter-token gap (seconds)."""
    run = load_run(level)
    ok = run.requests[run.requests["status"] == "ok"]
    gaps = [np.median(np.diff(np.asarray(c, dtype=float))) for c in ok["chunk_times_s"] if len(c) > 3]
    if not gaps:
        raise SystemExit(f"{level}: no completed request with more than 3 tokens")
    return float(np.median(gaps))


def sweep(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """(concurrency, decode step seconds) of every ``c*`` level under ``root``."""
    levels = sorted(p for p in root.glob("c[0-9]*") if p.is_dir())
    if not levels:
        raise SystemExit(f"{root}: no concurrency levels (c0001/, c0002/, ...) found")
    return (np.array([int(p.name[1:]) for p in levels], dtype=float),
            np.array([decode_step_s(p) for p in levels]))


def reference_probe(here: Path, there: Path, host_bound_from: int) -> list[tuple[int, float, float, float]]:
    """``(c, step ratio here/there, probe here, probe / ratio)`` per host-bound level in both
    sweeps that ran with the probe here."""
    c_here, s_here = sweep(here)
    other = dict(zip(*sweep(there), strict=True))
    rows = []
    for c, s in zip(c_here, s_here, strict=True):
        if c < host_bound_from or c not in other:
            continue
        probe_ms = host_probe_ms(read_meta(here / f"c{int(c):04d}"))
        if probe_ms is not None:
            ratio = s / other[c]
            rows.append((int(c), ratio, probe_ms / 1e3, probe_ms / 1e3 / ratio))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", type=Path, nargs="+", help="a folder of c* levels (several: with --against)")
    ap.add_argument("--min-concurrency", type=int, default=2,
                    help="levels below this are printed but left out of the line")
    ap.add_argument("--against", type=Path, help="another sweep of the same engine: speed ratio per level")
    ap.add_argument("--host-bound-from", type=int, default=128,
                    help="with --against: only levels with at least this many in flight")
    ap.add_argument("--host-speed", default="1",
                    help="the sweep's host speed against the file's reference host: a number or 'probe'")
    ap.add_argument("--write", action="store_true", help="write the line into --yaml")
    ap.add_argument("--yaml", type=Path, default=host_write.shipped_path(), help="the host-terms file")
    args = ap.parse_args()
    if args.against:
        if args.write:
            ap.error("--against only prints the other sweep's host in probe terms; it writes nothing")
        against(args.sweep, args.against, args.host_bound_from)
        return
    if len(args.sweep) > 1:
        raise SystemExit("give one sweep (several only with --against)")
    speed = sweep_speed(args.sweep[0], args.host_speed, ap)
    terms, inputs, results = line(args.sweep[0], args.min_concurrency, speed)
    if args.write:
        try:
            written = host_write.write_terms(args.yaml, terms, record(inputs, results, exclude=args.yaml),
                                             script="host_steps", entry="calibrated")
        except ValueError as exc:
            raise SystemExit(f"{display_path(args.yaml)}: {exc}") from None
        print(f"{display_path(args.yaml)}: {'written' if written else 'unchanged'} ({', '.join(terms)})")


def sweep_speed(root: Path, given: str, ap: argparse.ArgumentParser) -> float:
    """``--host-speed``: the number given, or with ``probe`` the median over the sweep's probed
    levels of their host speed against the reference; a clear error otherwise."""
    try:
        speed = host_speed_option(given)
    except ValueError as exc:
        ap.error(str(exc))
    if speed != "probe":
        return float(speed)
    metas = [read_meta(p) for p in sorted(root.glob("c[0-9]*"))]
    speeds = [run_host_speed(meta, "probe") for meta in metas if host_probe_ms(meta) is not None]
    if not speeds:
        ap.error(f"--host-speed probe: no level under {root} ran the host probe")
    return float(np.median(speeds))


def line(root: Path, min_concurrency: int, speed: float = 1.0) -> tuple[dict, dict, dict]:
    """Print the sweep's levels and line; return (terms, inputs, results) for the file: the
    line in the reference host's units (times ``speed``, the sweep host's speed against it)."""
    conc, step = sweep(root)
    for c, s in zip(conc, step, strict=True):
        print(f"c={c:5.0f}  decode step {s * 1e3:6.2f} ms")
    used = conc >= min_concurrency
    if used.sum() < 2:
        raise SystemExit(f"need two levels with c >= {min_concurrency}")
    seq_s, step_s = np.polyfit(conc[used], step[used], 1)
    resid = step[used] - (step_s + seq_s * conc[used])
    rms = float(np.sqrt(np.mean(resid ** 2)))
    print(f"line over {used.sum()} levels: step_s {step_s * 1e3:.3f} ms, seq_s {seq_s * 1e6:.2f} us/seq, "
          f"residual rms {rms * 1e3:.2f} ms")
    terms = {"step_s": round_decimals(step_s * speed, DECIMALS["step_s"]),
             "seq_s": round_decimals(seq_s * speed, DECIMALS["seq_s"])}
    if speed != 1.0:
        print(f"at the reference host (x{speed:.3f}): step_s {terms['step_s'] * 1e3:.3f} ms, "
              f"seq_s {terms['seq_s'] * 1e6:.2f} us/seq")
    inputs = {"sweeps": run_inputs([root]), "min_concurrency": min_concurrency, "host_speed": speed,
              "decimals": {k: DECIMALS[k] for k in terms}}
    results = significant({"levels": [int(c) for c in conc[used]], "step_s": step_s, "seq_s": seq_s,
                           "residual_rms_s": rms}, 6)
    return terms, inputs, results


def against(sweeps: list[Path], other: Path, host_bound_from: int) -> float:
    """Print probe / step ratio per host-bound level and their median: the probe time the other
    sweep's host would show (seconds, returned)."""
    rows = [row for here in sweeps for row in reference_probe(here, other, host_bound_from)]
    if not rows:
        raise SystemExit("no host-bound level in both sweeps with a host probe here")
    for c, ratio, probe, ref in rows:
        print(f"c={c:5d}  step ratio {ratio:5.2f}  probe {probe * 1e3:5.2f} ms  probe/ratio {ref * 1e3:5.2f} ms")
    median = float(np.median([r[3] for r in rows]))
    print(f"median probe/ratio over {len(rows)} levels: {median * 1e3:.2f} ms: the other sweep's host speed "
          f"is the reference's probe time over this")
    return median


if __name__ == "__main__":
    main()
