"""Numbers read from a flag's text, each with the caller's own wording of what went wrong."""

from __future__ import annotations

import math


def positive_number(text: str, not_a_number: str, not_positive: str) -> float:
    """``text`` as a finite float > 0.

    ValueError with the message ``not_a_number`` when ``text`` is no number, ``not_positive``
    when it is one but not finite or not > 0 (both already worded by the caller: the flag, the
    item and what the number means differ from flag to flag).
    """
    try:
        value = float(text)
    except ValueError:
        raise ValueError(not_a_number) from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(not_positive)
    return value
