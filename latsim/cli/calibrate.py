"""``latsim calibrate``: microbenchmark a GPU and fit its calibrated cost model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from latsim.cli.app import Opt, app
from latsim.cli.app import out as console


@app.command()
def calibrate(
    device: Annotated[str, Opt(help="Catalog GPU name, or auto to detect")] = "auto",
    quick: Annotated[bool, Opt("--quick", help="The quick grid (about 20 s on an H200)")] = False,
    out: Annotated[Path | None, Opt(help="Output folder (default: the shipped profile of the device)")] = None,
    resume: Annotated[bool, Opt("--resume/--restart", help="Skip points already measured in --out")] = True,
    fit_only: Annotated[bool, Opt("--fit-only", help="Re-fit the regressors from existing tables")] = False,
    profile: Annotated[Path | None, Opt(help="Profile folder for --fit-only")] = None,
    backend: Annotated[str, Opt(help="cuda | cpu (a tiny test run on the CPU)")] = "cuda",
    import_: Annotated[tuple[str, Path] | None, Opt("--import", help="FORMAT PATH: import a published database "
                                                    "(aiconfigurator) instead of measuring")] = None,
    engine_version: Annotated[str, Opt(help="--import: engine version to take (default: newest)")] = "newest",
    allow_partial: Annotated[bool, Opt("--allow-partial", help="--import: accept missing optional tables")] = False,
) -> None:
    """Microbenchmark the GPU's operators (or import published ones) and fit the calibrated cost model."""
    from latsim.calibration.cli import calibrate_command

    calibrate_command(device=device, quick=quick, out=out, resume=resume, fit_only=fit_only, backend=backend,
                      profile=profile, console=console, import_=import_, engine_version=engine_version,
                      allow_partial=allow_partial)
