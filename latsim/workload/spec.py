"""The spec-string grammar shared by arrival processes and length distributions.

A spec is ``NAME`` or ``NAME:ARGS`` where ``ARGS`` is a comma-separated list.  Keyword
families (``gamma:cv=2``, ``lognormal:median=600,sigma=0.8``) use ``KEY=VALUE`` items;
positional families (``fixed:200``, ``choice:128,512``) use bare values; ``empirical:PATH``
keeps everything after the first colon verbatim.  Names are case-insensitive and surrounding
whitespace is ignored.  Parsing here is purely lexical: each family checks its own values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    """A lexed spec: lower-case ``name`` and the raw text after the first colon (or ``None``)."""

    text: str
    name: str
    args: str | None


def split_spec(text: str, kind: str) -> Spec:
    """Split ``text`` into name and argument text; ``kind`` names the family for errors."""
    if not isinstance(text, str):
        raise ValueError(f"{kind} spec must be a string, got {text!r}")
    stripped = text.strip()
    name, sep, args = stripped.partition(":")
    name = name.strip().lower()
    if not name:
        raise ValueError(f"{kind} spec {text!r} has no name before ':'")
    return Spec(text=stripped, name=name, args=args.strip() if sep else None)


def keyword_args(spec: Spec, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, float]:
    """Parse ``KEY=VALUE`` items as floats, checking keys against ``required`` and ``optional``.

    Raises ValueError naming the offending item and listing the accepted keys.
    """
    accepted = ", ".join([*required, *(f"{k} (optional)" for k in optional)])
    out: dict[str, float] = {}
    for item in _items(spec):
        key, eq, raw = (part.strip() for part in item.partition("="))
        if not eq or not key:
            raise ValueError(f"{spec.name}: expected KEY=VALUE, got {item!r}; accepted keys: {accepted}")
        if key not in required and key not in optional:
            raise ValueError(f"{spec.name}: unknown key {key!r}; accepted keys: {accepted}")
        if key in out:
            raise ValueError(f"{spec.name}: key {key!r} given twice")
        out[key] = parse_number(raw, f"{spec.name}: {key}")
    missing = [k for k in required if k not in out]
    if missing:
        raise ValueError(f"{spec.name}: missing {', '.join(missing)}; accepted keys: {accepted}")
    return out


def no_args(spec: Spec) -> None:
    """Raise ValueError if a family that takes no arguments was given some."""
    if spec.args:
        raise ValueError(f"{spec.name} takes no arguments, got {spec.args!r}")


def positional_args(spec: Spec) -> list[float]:
    """Parse bare comma-separated numbers (at least one)."""
    items = _items(spec)
    if not items:
        raise ValueError(f"{spec.name}: expected at least one value after ':', e.g. {spec.name}:128")
    return [parse_number(item, f"{spec.name}: value") for item in items]


def parse_number(raw: str, what: str) -> float:
    """Parse a finite float, raising ValueError that quotes ``what`` and the raw text."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {raw!r}")
    return value


def format_number(value: float) -> str:
    """Shortest text that parses back to ``value`` (``600`` rather than ``600.0``)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def format_spec(name: str, params: Mapping[str, float | None]) -> str:
    """Canonical ``name:key=value,...`` text, skipping ``None`` values."""
    items = [f"{k}={format_number(v)}" for k, v in params.items() if v is not None]
    return f"{name}:{','.join(items)}" if items else name


def _items(spec: Spec) -> list[str]:
    if spec.args is None or spec.args == "":
        return []
    items = [item.strip() for item in spec.args.split(",")]
    if any(not item for item in items):
        raise ValueError(f"{spec.name}: empty item in {spec.args!r}")
    return items
