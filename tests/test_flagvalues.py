"""latsim.flagvalues.positive_number: the caller's two messages, and only finite numbers > 0."""

from __future__ import annotations

import pytest

from latsim.flagvalues import positive_number


def test_a_positive_number_is_read() -> None:
    assert positive_number(" 2.5 ", "nan-msg", "range-msg") == 2.5


@pytest.mark.parametrize(("text", "message"), [("fast", "nan-msg"), ("", "nan-msg"), ("0", "range-msg"),
                                               ("-1", "range-msg"), ("inf", "range-msg"), ("nan", "range-msg")])
def test_each_failure_carries_its_own_message(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        positive_number(text, "nan-msg", "range-msg")
