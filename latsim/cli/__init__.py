"""The ``latsim`` command line: parse arguments, call the library, print or write; nothing else.

One module per command (``predict``, ``validate``, ``measure`` with ``host-speed``,
``calibrate``, ``models`` and ``devices`` in ``catalog``), each registering on the shared
:data:`~latsim.cli.app.app`.  Every error a user can cause ends as one line on stderr and exit
status 2.
"""

from __future__ import annotations

import sys

import typer

from latsim.cli import calibrate, catalog, compare, measure, plan, predict, report, sweep, validate
from latsim.cli.app import UserError, app, err

__all__ = ["app", "main"]
# imported for their registration
_COMMANDS = (calibrate, catalog, compare, measure, plan, predict, report, sweep, validate)


def main() -> None:
    """Console entry point: run the app, turning user errors into one line and exit status 2."""
    try:
        code = app(standalone_mode=False)  # click returns a typer.Exit's status instead of raising it
        if isinstance(code, int) and code:
            sys.exit(code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except (UserError, ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # click usage errors carry their own exit code
        code = getattr(exc, "exit_code", None)
        if code is not None and hasattr(exc, "show"):
            exc.show()
            sys.exit(code)
        raise


if __name__ == "__main__":
    main()
