"""The ``latsim`` Typer app, its consoles and the user-error type shared by every command module."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Predict LLM serving latency (TTFT, TPOT, ITL, E2E) before deploying.")
out = Console(width=None if sys.stdout.isatty() else 160)  # pipes and files get full tables
err = Console(stderr=True)
Opt = typer.Option


class UserError(Exception):
    """A problem with the user's input: reported as one line, exit status 2."""
