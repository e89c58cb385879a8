"""Shared helper: run the ``latsim`` command line in-process."""

from __future__ import annotations

import sys

import pytest

from latsim.cli import main


@pytest.fixture
def cli(monkeypatch, capsys):
    """``cli(*argv) -> (exit status, stdout, stderr)``."""

    def run(*argv: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["latsim", *argv])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
