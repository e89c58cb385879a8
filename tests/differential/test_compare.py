"""The comparison layer on hand-made records (no vLLM needed)."""

from __future__ import annotations

import pytest

from latsim.oracle.differential import (
    BRIDGE,
    Case,
    OracleError,
    compare,
    latsim_records,
    normalise,
    oracle_records,
    record_from_json,
    report,
)
from latsim.oracle.steprecord import StepRecord, StreamRequest
from tests.script_module import load_script


def rec(step, scheduled, **kw) -> StepRecord:
    return StepRecord(step, tuple(scheduled), **kw)


VLLM = [
    rec(0, [("a", 32), ("b", 16)], new=("a", "b"), cached_tokens={"b": 16}),
    rec(1, [("a", 1), ("b", 1)], finished=("b",)),
    rec(2, [("a", 1)], preempted=(), finished=("a",)),
]


def test_identical_records_have_no_difference_and_zero_hits_are_a_convention():
    latsim = [VLLM[0].__class__(**{**VLLM[0].__dict__, "cached_tokens": {"a": 0, "b": 16}}), *VLLM[1:]]
    assert compare(latsim, VLLM) == []
    assert normalise(latsim)[0].cached_tokens == {"b": 16}
    assert report(latsim, VLLM) == "identical"


def test_each_field_and_the_order_are_compared():
    latsim = [
        rec(0, [("b", 16), ("a", 32)], new=("b", "a"), cached_tokens={"b": 0}),
        rec(1, [("a", 1), ("b", 2)], finished=("b",)),
        rec(2, [("a", 1)], preempted=("c",), finished=("a",)),
        rec(3, []),
    ]
    diffs = compare(latsim, VLLM)
    assert [(d.step, d.field) for d in diffs] == [
        (0, "scheduled"), (0, "new"), (0, "cached_tokens"), (1, "scheduled"), (2, "preempted"), (-1, "steps"),
    ]
    assert diffs[0].detail == "same requests and tokens, different order"
    assert diffs[2].detail == "b: latsim 0 vs vLLM 16"
    assert diffs[3].detail == "tokens b: latsim 2 vs vLLM 1"
    assert diffs[4].detail == "only latsim ['c']"
    assert str(diffs[5]) == "run length: latsim ran 4 steps, vLLM 3"


def test_report_shows_the_first_difference_with_its_neighbours():
    latsim = [VLLM[0], rec(1, [("a", 1)]), VLLM[2]]
    text = report(latsim, VLLM, context=1, case=Case((StreamRequest("a", 0, 32, 3),), {"max_model_len": 64}))
    lines = text.splitlines()
    assert lines[0].startswith("case ''") and lines[1] == "stream (1 requests): a@0(32+3)"
    assert lines[2] == "2 difference(s); first: step 1 scheduled: only vLLM ['b']"  # and finished
    assert ">> step    1 latsim: a:1" in text and ">>           vLLM: a:1 b:1 | fin b" in text
    assert "   step    0 latsim: a:32 b:16 | new a b(c16)" in text


def test_bridge_json_round_trip():
    bridge = load_script(BRIDGE)
    for r in VLLM:
        assert record_from_json(bridge.record_to_json(r)) == r


def test_latsim_side_refuses_what_it_cannot_model():
    stream = (StreamRequest("a", 0, 10, 2),)
    config = dict(num_gpu_blocks=8, max_num_seqs=2, max_num_batched_tokens=64, max_model_len=64)
    assert latsim_records(Case(stream, {**config, "seed": 3, "scheduler_reserve_full_isl": True}))
    assert latsim_records(Case(stream, {**config, "async_scheduling": True}))
    with pytest.raises(NotImplementedError, match=r"watermark=0\.1"):
        latsim_records(Case(stream, {**config, "watermark": 0.1}))


def test_missing_reference_python_is_an_oracle_error(tmp_path):
    with pytest.raises(OracleError, match="no vLLM reference python"):
        oracle_records([], python=tmp_path / "missing" / "python")
