"""Shared helper: run the ``latsim`` command line in-process."""

from __future__ import annotations

import pytest

from tests.cli_runner import run_cli


@pytest.fixture
def cli(monkeypatch, capsys):
    """``cli(*argv) -> (exit status, stdout, stderr)``."""

    def run(*argv: str) -> tuple[int, str, str]:
        return run_cli(list(argv), monkeypatch, capsys)

    return run
