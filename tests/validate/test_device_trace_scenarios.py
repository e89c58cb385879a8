"""scripts/device_trace.py's scenario strings: what each kind takes, and a clear refusal otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.script_module import load_script

dt = load_script(Path("device_trace.py"))


def test_a_chunked_scenario_may_share_prefixes_among_its_decoders() -> None:
    plain = dt.parse_scenario("chunked:in=2048,n=4,decodes=64,din=512")
    shared = dt.parse_scenario("chunked:in=2048,n=4,decodes=64,din=512,prefix=1024,groups=4")
    assert "groups" not in plain
    assert (shared["prefix"], shared["groups"], shared["decodes"]) == (1024, 4, 64)


@pytest.mark.parametrize("text, words", [
    ("chunked:in=2048,n=4,decodes=64,din=512,prefix=1024", "prefix and groups together"),
    ("decode:seqs=64,in=512,groups=4", "decode takes in, seqs"),
    ("chunked:in=2048,n=4,decodes=64", "missing din"),
    ("shared:seqs=64,in=512,prefix=0,groups=4", "'prefix=0'"),
    ("stream:seqs=4", "kind must be one of"),
])
def test_a_bad_scenario_is_refused_naming_what_is_accepted(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        dt.parse_scenario(text)
