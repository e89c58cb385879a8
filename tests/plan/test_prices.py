"""Prices: every shipped figure has a source and a date; overrides win; bad input is one clear error."""

from __future__ import annotations

import re

import pytest

from latsim.plan.prices import PRICES_FILE, parse_price_overrides, price_of, read_price_list


def test_every_listed_price_has_source_and_date() -> None:
    prices = read_price_list(PRICES_FILE)
    assert {"h100", "h200", "a100", "l40s"} <= set(prices)
    for price in prices.values():
        assert price.source.count("http") == 1
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", price.as_of or "")
        assert price.origin == "list" and price.usd_per_gpu_hour > 0


def test_override_wins_and_aliases_resolve() -> None:
    overrides = parse_price_overrides(["h100-sxm=2.49", "h200=3.1,l40s=0.9"])
    assert overrides == {"h100": 2.49, "h200": 3.1, "l40s": 0.9}
    price = price_of("h100", overrides)
    assert (price.usd_per_gpu_hour, price.origin) == (2.49, "user")
    assert "--price" in price.label()
    assert price_of("h100").origin == "list"


def test_device_missing_from_list_falls_back_to_catalog() -> None:
    listed = read_price_list(PRICES_FILE)
    missing = [d for d in ("a6000", "gaudi2", "gaudi3") if d not in listed]
    assert missing, "the fallback needs a catalog device without a listed price"
    price = price_of(missing[0])
    assert price.origin == "catalog" and "catalog estimate" in price.label()


@pytest.mark.parametrize(("spec", "words"), [
    ("h1000=2", "unknown device 'h1000'"),
    ("h100", "expected GPU=USD_PER_HOUR"),
    ("h100=cheap", "'cheap' is not a number"),
    ("h100=-1", "finite number > 0"),
    ("h100=nan", "finite number > 0"),
])
def test_bad_price_is_one_clear_error(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_price_overrides([spec])


def test_bad_price_file_names_entry(tmp_path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("prices:\n  h100: {usd_per_gpu_hour: 0, provider: x, offer: y, source: z, as_of: '2026-01-01'}\n")
    with pytest.raises(ValueError, match=re.escape("prices.h100.usd_per_gpu_hour")):
        read_price_list(bad)
