"""Command-line options derived from :class:`latsim.config.Settings` (one declaration).

:func:`with_settings` gives a command one ``--option`` per setting (booleans as
``--x/--no-x``), with the help declared beside the setting, and hands the command the parsed
values as one :class:`~latsim.config.Settings` (``None``: not given on the command line).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Annotated, Any, get_type_hints

import typer

from latsim.config import Settings, setting_flag


def _parameters() -> list[inspect.Parameter]:
    hints = get_type_hints(Settings)
    params = []
    for f in fields(Settings):
        flag = setting_flag(f.name)
        decl = f"{flag}/--no-{flag[2:]}" if hints[f.name] == (bool | None) else flag
        option = typer.Option(decl, help=f.metadata["help"], rich_help_panel=f"{f.metadata['section']} settings"
                              if f.metadata["section"] != "top" else "deployment settings")
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=Annotated[hints[f.name], option]))
    return params


def with_settings(command: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate ``command(settings: Settings, ...)`` so that its CLI takes every setting as an option."""
    names = [f.name for f in fields(Settings)]
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "settings"]
    clash = set(names) & {p.name for p in own}
    assert not clash, f"{command.__name__} redeclares settings {clash}"

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        settings = Settings(**{name: kwargs.pop(name) for name in names})
        return command(settings=settings, **kwargs)

    params = own + _parameters()
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # Typer must read the new signature, not the command's
    return wrapper
