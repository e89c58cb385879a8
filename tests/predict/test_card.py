"""The card's markdown and the README block are written from the shipped surrogate.json."""

from __future__ import annotations

import json
from importlib.resources import files

import pytest

from latsim.predict.card import README_BEGIN, README_END, replace_readme_block, write_card_markdown


@pytest.fixture(scope="module")
def card() -> dict:
    return json.loads((files("latsim") / "data" / "surrogate" / "surrogate.json").read_text())["card"]


def test_the_shipped_card_markdown_is_the_one_surrogate_json_gives(card):
    assert (files("latsim") / "data" / "surrogate" / "CARD.md").read_text() == write_card_markdown(card)


def test_the_readme_block_is_rewritten_between_its_markers(card):
    text = f"before\n{README_BEGIN}\nstale\n{README_END}\nafter\n"
    out = replace_readme_block(text, card)
    assert out.startswith("before\n" + README_BEGIN) and out.endswith(README_END + "\nafter\n")
    assert "stale" not in out and "| TTFT P50 / P99 |" in out
    assert replace_readme_block(out, card) == out


def test_the_repository_readme_carries_the_shipped_card(card):
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    if not readme.exists():
        pytest.skip("no README next to the tests")
    text = readme.read_text()
    assert replace_readme_block(text, card) == text


def test_a_readme_without_the_markers_is_refused(card):
    with pytest.raises(ValueError, match="has no"):
        replace_readme_block("no block here\n", card)
