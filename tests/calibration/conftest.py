"""Fixtures for the calibration tests: a small recorded H200 profile, fitted once per session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from latsim.calibration.fit import fit_profile
from latsim.catalog import load_device

DATA = Path(__file__).parent / "data" / "h200-small"


@pytest.fixture(scope="session")
def fitted_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the recorded tables with fitted regressors (torch-free)."""
    folder = tmp_path_factory.mktemp("profile") / "h200"
    shutil.copytree(DATA, folder)
    fit_profile(folder, load_device("h200"))
    return folder


@pytest.fixture
def profile_copy(tmp_path: Path) -> Path:
    """A fresh, unfitted copy of the recorded tables that a test may damage."""
    folder = tmp_path / "h200"
    shutil.copytree(DATA, folder)
    return folder
