"""Parsing of the planner commands' list options (``--devices h100,h200``, ``--tps 1,2,4``,
``--qps 1:20``); every error is a ValueError naming the option, the bad value and what is accepted."""

from __future__ import annotations

from typing import Any, get_type_hints

from latsim.flagvalues import positive_number


def names(option: str, text: str) -> tuple[str, ...]:
    """``"h100, h200"`` -> ``("h100", "h200")``; devices are resolved to catalog names (close
    names suggested for an unknown one)."""
    from latsim.catalog.lookup import load_device

    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"{option} is empty; give a comma-separated list")
    if option == "--devices":
        items = [load_device(t).name for t in items]
    return tuple(dict.fromkeys(items))


CONFIG_KEYS = ("tp", "replicas", "weight_dtype", "kv_dtype", "max_num_seqs", "max_num_batched_tokens", "router")


def configs(option: str, text: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """``"h100,h100:tp=2:weight_dtype=fp8"`` -> ``(label, settings)`` pairs: a GPU name, optionally
    followed by ``:key=value`` settings of :data:`CONFIG_KEYS`.  The label is the item as written
    (the catalog name alone for a bare GPU)."""
    from pydantic import TypeAdapter, ValidationError

    from latsim.config import Settings

    hints = get_type_hints(Settings)
    out: dict[str, dict[str, Any]] = {}
    for item in (t.strip() for t in text.split(",")):
        name, *pairs = item.split(":")
        settings: dict[str, Any] = {"device": names(option, name)[0]}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in CONFIG_KEYS:
                raise ValueError(f"{option} {item!r}: {pair!r} is not KEY=VALUE with KEY one of "
                                 f"{', '.join(CONFIG_KEYS)}, e.g. h100:tp=2:weight_dtype=fp8")
            try:
                settings[key] = TypeAdapter(hints[key]).validate_python(value)
            except ValidationError:
                raise ValueError(f"{option} {item!r}: {value!r} is not a valid {key}") from None
        out[item if pairs else settings["device"]] = settings
    return tuple(out.items())


def ints(option: str, text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)`` (each >= 1)."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"{option} {text!r}: {item!r} is not a whole number >= 1")
        out.append(int(item))
    return tuple(dict.fromkeys(out))


def rates(option: str, text: str, points: int = 8) -> tuple[float, ...]:
    """Request rates: ``"1:20"`` (``points`` rates spread geometrically from 1 to 20),
    ``"1:20:5"`` (5 rates), or a list ``"2,4,8"``.  Each must be a finite number > 0."""
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"{option} {text!r}: expected LOW:HIGH or LOW:HIGH:POINTS, e.g. 1:20")
        lo, hi = (_rate(option, text, p) for p in parts[:2])
        n = points if len(parts) == 2 else ints(option, parts[2])[0]
        if not hi > lo:
            raise ValueError(f"{option} {text!r}: the high rate must exceed the low rate, e.g. 1:20")
        if n < 2:
            raise ValueError(f"{option} {text!r}: a range needs at least 2 points")
        return tuple(lo * (hi / lo) ** (i / (n - 1)) for i in range(n))
    return tuple(sorted({_rate(option, text, p) for p in text.split(",")}))


def _rate(option: str, text: str, item: str) -> float:
    return positive_number(item, f"{option} {text!r}: {item.strip()!r} is not a request rate (req/s)",
                           f"{option} {text!r}: rates must be finite numbers > 0, got {item.strip()}")
