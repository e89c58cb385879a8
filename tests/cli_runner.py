"""Run the ``latsim`` command line in-process, as a test sees it: ``(exit status, stdout, stderr)``."""

from __future__ import annotations

import sys

import pytest

from latsim.cli import main


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``latsim *argv`` through :func:`latsim.cli.main`; a ``SystemExit`` gives its status (``None``: 0,
    a message: 1, as Python's own exit does)."""
    monkeypatch.setattr(sys, "argv", ["latsim", *argv])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
