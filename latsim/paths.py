"""Where shipped data lives: one tree, ``latsim/data/``, installed with the package.

- ``catalog/``: GPU specs (``devices.yaml``) and model architectures (``models/*.json``).
- ``costmodel/``: the roofline's efficiency parameters (``roofline.yaml``).
- ``engines/<engine>/``: what is specific to one serving engine (vLLM: its memory plan's
  coefficients ``memory.yaml`` and its host-side step terms ``host.yaml``, each written by the
  script that fits it).
- ``calibration/<device>/``: measured (or imported) GPU profiles.
- ``grids/``: the calibration grid's shapes.

Measurements the repository keeps but does not ship (live validation runs, host sweeps) are
in the top-level ``data/`` folder of the repository, not here.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
CATALOG = DATA / "catalog"
COSTMODEL = DATA / "costmodel"
ENGINES = DATA / "engines"
CALIBRATION = DATA / "calibration"
GRIDS = DATA / "grids"


def engine_data(engine: str, name: str) -> Path:
    """The shipped data file ``name`` of serving engine ``engine`` (e.g. ``vllm``, ``host.yaml``)."""
    return ENGINES / engine / name
