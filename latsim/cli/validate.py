"""``latsim validate``: replay measured runs and report the prediction's signed errors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from latsim.cli.app import Opt, UserError, app, out


@app.command()
def validate(
    run: Annotated[Path, typer.Argument(help="A measured run directory, or a folder of them")],
    device: Annotated[str, Opt(help="GPU to replay on: auto (each run's recorded GPU) or a catalog name "
                               "(runs recorded on another GPU are left out)")] = "auto",
    out_dir: Annotated[Path | None, Opt("--out", help="Write errors.csv, validation.png (summary) and "
                                                     "validation.html (one page per run) here")] = None,
    as_json: Annotated[bool, Opt("--json")] = False,
    seed: Annotated[int, Opt()] = 0,
    host_speed: Annotated[str, Opt(help="Host CPU speed to replay with: a number, 'probe' (each level's "
                                   "host-probe median against the reference; a diagnostic) or "
                                   "'probe-mean' (the probe's mean, for a host of two speeds)")] = "1",
    profile: Annotated[Path | None, Opt(help="Price the GPU with this fitted profile folder (e.g. "
                                        "latsim/data/calibration/h200-aic) instead of the device's own")] = None,
) -> None:
    """Replay measured runs in the simulator and print signed errors (predicted vs measured)."""
    from latsim.report.tables import validation_table
    from latsim.validate.compare import (
        CLIENT_LAG_LIMIT_S,
        compare_run,
        error_table,
        headline,
        host_speed_option,
    )

    if not run.exists():
        raise UserError(f"{run} does not exist")
    try:
        speed = host_speed_option(host_speed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        runs = _runs_and_devices(run, device)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    levels = [compare_run(r, d, seed=seed, host_speed=speed, profile=profile) for r, d in runs]
    table = error_table(levels)
    if out_dir:
        from latsim.atomic import atomic_write_text
        from latsim.report.validation_report import write_report

        atomic_write_text(out_dir / "errors.csv", table.to_csv(index=False))
        write_report(levels, table, out_dir, title=str(run))
    if as_json:
        print(table.to_json(orient="records"))
        return
    out.print(validation_table(table))
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    out.print("median |error| over Poisson levels:")
    out.print(headline(table).to_string(float_format=pct))
    bound = sorted({f"{lv.run_dir}" for lv in levels if lv.client_bound})
    if bound:
        out.print(f"client-bound runs (send lag p99 > {CLIENT_LAG_LIMIT_S * 1e3:.0f} ms; the client, not the "
                  f"engine, set their latencies): {', '.join(bound)}")
        out.print("median |error| over Poisson levels, client-bound runs left out:")
        out.print(headline(table, engine_bound_only=True).to_string(float_format=pct))
    _band_check(levels, table, speed)


def _runs_and_devices(root: Path, device: str) -> list[tuple[Path, str]]:
    """The runs below ``root`` with the GPU each is replayed on: its recorded one (``auto``; a run
    that recorded none is an error), or ``device``, leaving out (and naming) runs recorded on
    another GPU."""
    from latsim.catalog.lookup import load_device
    from latsim.measure.records import read_meta
    from latsim.validate.compare import find_runs, measured_on, recorded_device

    runs = find_runs(root)
    recorded = [(r, recorded_device(read_meta(r))) for r in runs]
    if device == "auto":
        unknown = [str(r) for r, d in recorded if d is None]
        if unknown:
            raise ValueError(f"--device auto: {unknown[0]} records no GPU latsim knows (engine_config.versions.gpu)"
                             f"{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''}; pass --device NAME")
        return [(r, str(d)) for r, d in recorded]
    name = load_device(device).name
    other = [(r, d) for r, d in recorded if not measured_on(d, name)]
    if other:
        gpus = ", ".join(sorted({str(d) for _, d in other}))
        out.print(f"left out {len(other)} level(s) measured on another GPU ({gpus}); replay them with "
                  f"--device auto")
    kept = [(r, name) for r, d in recorded if measured_on(d, name)]
    if not kept:
        raise ValueError(f"no run below {root} was measured on {name} (they were on {gpus}); use --device auto")
    return kept


def _band_check(levels, table, speed: float | str) -> None:
    """Print, per GPU with a shipped band, how many Poisson levels measured on it fall inside
    ``latsim predict``'s live error band of their cell."""
    from latsim.validate.error_band import describe_inside, inside_band, shipped_band, with_host_ratios

    for device in sorted({lv.deployment.device.name for lv in levels}):
        band = shipped_band(device)
        mine = [lv for lv in levels if lv.deployment.device.name == device == band.device]
        if not mine:
            continue
        rows = table[table["run"].isin({lv.run_dir for lv in mine})]
        counts = inside_band(with_host_ratios(rows, mine, band), band, host_known=speed != 1.0)
        if counts.empty:
            continue
        out.print(f"inside the {device} live error band `latsim predict` prints (aim 80 %; levels it was built "
                  f"from count too): {describe_inside(counts)}")
