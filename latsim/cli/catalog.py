"""``latsim models`` and ``latsim devices``: the built-in catalogs."""

from __future__ import annotations

from latsim.cli.app import app, out


@app.command()
def models() -> None:
    """List the built-in model catalog."""
    from latsim.report.catalog import models_table

    out.print(models_table())


@app.command()
def devices() -> None:
    """List the GPU catalog (and which GPUs have measured calibration)."""
    from latsim.report.catalog import devices_table

    out.print(devices_table())
