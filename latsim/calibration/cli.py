"""``latsim calibrate``: measure a GPU's operator costs, then fit the calibrated cost model.

User errors (no CUDA GPU, a GPU that is not ``--device``, an unusable profile) raise
ValueError with a one-line message; ``latsim.cli.main`` turns that into exit status 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.lookup import detect_device, name_matches
from latsim.costmodel.profile.store import read_profile, shipped_profile_dir

if TYPE_CHECKING:
    from latsim.calibration.runner import RunRequest

NO_GPU = "no CUDA GPU found; use --backend cpu for a test run"


def _gpu_name(backend: str) -> str:
    if backend == "cpu":
        return "cpu"
    from latsim.calibration.context import import_torch

    torch = import_torch()
    if not torch.cuda.is_available():
        raise ValueError(NO_GPU)
    return str(torch.cuda.get_device_properties(0).name)


def resolve_device(device: str, backend: str) -> DeviceSpec | None:
    """The catalog device to calibrate (None for the CPU backend); ValueError on a mismatch."""
    from latsim.catalog import load_device

    spec = load_device(device) if device != "auto" and backend != "cpu" else None  # unknown name first
    found = _gpu_name(backend)
    if backend == "cpu":
        return None
    if spec is None:
        return detect_device(found)
    if not name_matches(found, spec.name, spec.aliases):
        raise ValueError(f"--device {device} was asked for, but this machine's GPU is {found!r}")
    return spec


def calibrate_command(device: str = "auto", quick: bool = False, out: Path | None = None, resume: bool = True,
                      fit_only: bool = False, backend: str = "cuda", profile: Path | None = None,
                      console: Console | None = None, import_: tuple[str, Path] | None = None,
                      engine_version: str = "newest", allow_partial: bool = False) -> dict[str, Any]:
    """Run (or with ``fit_only`` re-fit) a calibration; returns the fit report (or the profile for cpu).

    ``import_`` = (format, path) converts a published database instead of measuring
    (:mod:`latsim.calibration.aic_import`); it needs a catalog ``device``.
    """
    console = console or Console()
    if import_ is not None:
        return _import(import_, device, out, engine_version, allow_partial, console)
    if fit_only:
        return _fit(profile or out, device, console)
    spec = resolve_device(device, backend)
    name = spec.name if spec is not None else "cpu"
    folder = out or (shipped_profile_dir(name) if spec is not None else None)
    if folder is None:
        raise ValueError("--backend cpu needs --out DIR (CPU timings must not replace a GPU profile)")
    prof = _measure(folder, spec, backend, quick, resume, console)
    if spec is None:
        console.print("CPU test run: tables written; fitting needs a catalog GPU profile (skipped)")
        return prof
    return _fit(folder, spec.name, console)


def _import(import_: tuple[str, Path], device: str, out: Path | None, engine_version: str, allow_partial: bool,
            console: Console) -> dict[str, Any]:
    from latsim.calibration.aic_import import import_profile
    from latsim.catalog import load_device

    if device == "auto":
        raise ValueError("--import needs --device NAME (the catalog GPU the database was measured on)")
    spec = load_device(device)
    report = import_profile(import_[0], Path(import_[1]), spec, out, engine_version, allow_partial)
    src = report["imported"]["source"]
    title = (f"held-out error, {spec.name} imported from {src['repository']}@{src['commit'][:12]} "
             f"({src['engine']} {src['engine_version']})")
    console.print(fit_table(report, title))
    for what, how in report["imported"]["not_measured"].items():
        console.print(f"not measured: {what}: {how}")
    return report


def _measure(folder: Path, spec: DeviceSpec | None, backend: str, quick: bool, resume: bool,
             console: Console) -> dict[str, Any]:
    from latsim.calibration.runner import RunRequest

    grid = "tiny" if backend == "cpu" else ("quick" if quick else "full")
    req = RunRequest(out=folder, device=spec.name if spec else "cpu", grid=grid, backend=backend,
                     aliases=spec.aliases if spec else (), resume=resume)
    prof = _run_grid(req, console)
    if grid == "full" and any("paged" in str(i) for i in (prof.get("impl") or {}).get("attention") or []):
        _measure_tiles(folder, req, console)
        _measure_spread(folder, resume, console)
    return prof


def _run_grid(req: RunRequest, console: Console) -> dict[str, Any]:
    """One grid's run with a progress display, then its timing table; the run's profile."""
    from latsim.calibration.progress import RunDisplay, timing_table
    from latsim.calibration.runner import run_calibration

    display = RunDisplay(console)
    try:
        prof = run_calibration(req, on_point=display.on_point, on_start=display.on_start)
    finally:
        display.close()
    console.print(timing_table(prof, f"{req.grid} grid on {prof['gpu_name']} -> {req.out}"))
    return prof


TILES_GRID = "decode-tiles"


def _measure_tiles(folder: Path, req: RunRequest, console: Console) -> None:
    """Time the ``decode-tiles`` sweeps in ``folder/decode-tiles`` (resumable like the main run) and
    copy their rows to ``folder``'s ``decode_tiles.parquet``, where the fit reads FA3's key tile
    (:mod:`latsim.costmodel.profile.tiles`); only after a full grid whose decode attention ran
    over vLLM's paged cache, the only kernel whose tiles they describe."""
    import dataclasses

    from latsim.atomic import atomic_write
    from latsim.calibration.fit import TILES_TABLE
    from latsim.costmodel.profile.tables import shard_path

    sub = folder / TILES_GRID
    _run_grid(dataclasses.replace(req, out=sub, grid=TILES_GRID, families=("attention",)), console)
    rows = shard_path(sub, "attention").read_bytes()

    def fill(f: IO[bytes]) -> None:
        f.write(rows)

    atomic_write(shard_path(folder, TILES_TABLE), fill)


def _measure_spread(folder: Path, resume: bool, console: Console) -> None:
    """Time the spread probe (:mod:`latsim.calibration.spread_probe`) into ``folder``'s
    ``skew_grid.json``, which the fit turns into ``decode_spread.json``; kept when resuming a
    folder that has it (the probe runs whole: about 40 s)."""
    from latsim.calibration.context import make_context
    from latsim.calibration.progress import spread_display
    from latsim.calibration.spread_probe import SKEW_GRID_FILE, device_time_call, plan, run_spread_probe

    path = folder / SKEW_GRID_FILE
    if resume and path.is_file():
        console.print(f"spread probe: kept {path}")
        return
    ctx, pairs = make_context("cuda"), len(plan())
    with spread_display(console, pairs) as advance:
        run_spread_probe(path, device_time_call(ctx), ctx.torch.cuda.get_device_name(0), on_case=advance)
    console.print(f"spread probe: {pairs} pairs -> {path}")


def _fit(folder: Path | None, device: str, console: Console) -> dict[str, Any]:
    from latsim.calibration.fit import fit_profile
    from latsim.catalog import load_device

    if folder is None:
        if device == "auto":
            raise ValueError("--fit-only needs --profile DIR (or --device NAME for the shipped profile)")
        folder = shipped_profile_dir(load_device(device).name)
    prof = read_profile(folder)
    spec = detect_device(str(prof["gpu_name"])) if device == "auto" else load_device(device)
    if (prof.get("source") or {}).get("kind") == "imported":
        report = _refit_imported(folder, spec)
    else:
        report = fit_profile(folder, spec)
    console.print(fit_table(report, f"held-out error, {spec.name} profile {folder}"))
    return report


def _refit_imported(folder: Path, spec: Any) -> dict[str, Any]:
    """An imported profile re-fits with the import's own parameters; its memory model (fitted on
    latsim's H200 rows at import) and fixed costs stay as the import wrote them."""
    from latsim.calibration.aic_import import refit_imported
    from latsim.calibration.fit import fit_frames

    return refit_imported(folder, spec, tuple(f for f in fit_frames(folder) if f != "memory"))


def fit_table(report: dict[str, Any], title: str) -> Table:
    """Per family: train/test rows and held-out MAPE, median and p90 APE (percent)."""
    table = Table(title=title)
    for col in ("family", "train", "test", "MAPE %", "median APE %", "p90 APE %"):
        table.add_column(col, justify="left" if col == "family" else "right")
    for fam, rep in report["families"].items():
        cells = [f"{rep[k]:.1f}" if isinstance(rep.get(k), float) else "-" for k in ("mape", "median_ape", "p90_ape")]
        table.add_row(fam, str(rep.get("n_train", "-")), str(rep.get("n_test", "-")), *cells)
    return table
