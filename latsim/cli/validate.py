"""``latsim validate``: replay measured runs and report the prediction's signed errors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from latsim.cli.app import Opt, UserError, app, out


@app.command()
def validate(
    run: Annotated[Path, typer.Argument(help="A measured run directory, or a folder of them")],
    device: Annotated[str, Opt(help="GPU the run was measured on")] = "h200",
    out_dir: Annotated[Path | None, Opt("--out", help="Write errors.csv, validation.png (summary) and "
                                                     "validation.html (one page per run) here")] = None,
    as_json: Annotated[bool, Opt("--json")] = False,
    seed: Annotated[int, Opt()] = 0,
    host_speed: Annotated[str, Opt(help="Host CPU speed to replay with: a number, or 'probe' (each level's "
                                   "host-probe median against the reference; a diagnostic)")] = "1",
    profile: Annotated[Path | None, Opt(help="Price the GPU with this fitted profile folder (e.g. "
                                        "latsim/data/calibration/h200-aic) instead of the device's own")] = None,
) -> None:
    """Replay measured runs in the simulator and print signed errors (predicted vs measured)."""
    from latsim.report.tables import validation_table
    from latsim.validate.compare import (
        CLIENT_LAG_LIMIT_S,
        compare_run,
        error_table,
        find_runs,
        headline,
        host_speed_option,
    )

    if not run.exists():
        raise UserError(f"{run} does not exist")
    try:
        speed = host_speed_option(host_speed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    levels = [compare_run(r, device, seed=seed, host_speed=speed, profile=profile) for r in find_runs(run)]
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
    _band_check(levels, table, device, speed)


def _band_check(levels, table, device: str, speed: float | str) -> None:
    """Print how many Poisson levels fall inside ``latsim predict``'s live error band of their cell."""
    from latsim.validate.error_band import describe_inside, inside_band, shipped_band, with_host_ratios

    band = shipped_band()
    if device != band.device:
        return
    counts = inside_band(with_host_ratios(table, levels), band, host_known=speed != 1.0)
    if counts.empty:
        return
    out.print(f"inside the live error band `latsim predict` prints (aim 80 %; levels it was built from count too): "
              f"{describe_inside(counts)}")
