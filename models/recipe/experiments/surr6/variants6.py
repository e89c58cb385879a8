"""Feature variants for harness6.py: get(name) -> (extend(feats) -> feats, columns)."""
from __future__ import annotations

import pandas as pd

from latsim.predict.features import FEATURES


def _none(feats: pd.DataFrame) -> pd.DataFrame:
    return feats


VARIANTS = {"none": (_none, list(FEATURES))}


def get(name: str):
    return VARIANTS[name]
