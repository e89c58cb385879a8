"""Fitted predictors of P50/P90/P99 latency, throughput and stability for unseen configurations.

:func:`load_surrogate` returns the shipped surrogate (``latsim/data/surrogate/``), whose
``predict(frame)`` takes a DataFrame of configurations (``GRID_COLUMNS``) and returns one row
of predictions per configuration.  How it is built: ``models/recipe/README.md``.  Imported
lazily: the design and feature modules do not need xgboost.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {"GRID_COLUMNS": "latsim.predict.features", "Surrogate": "latsim.predict.surrogate",
            "load_surrogate": "latsim.predict.surrogate"}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'latsim.predict' has no attribute {name!r}")
    return getattr(import_module(module), name)
