"""latsim's vLLM scheduler on hand-made request streams (no clock, no cost model)."""

from __future__ import annotations

import pytest

from latsim.oracle.steprecord import StreamRequest
from latsim.oracle.stream import run_latsim_scheduler


def stream(n, prompt, output, step=0, group=-1, prefix=0):
    return [StreamRequest(f"r{i}", step, prompt, output, group, prefix) for i in range(n)]


def test_budget_fills_with_prefills_then_caps_at_max_num_seqs():
    recs = run_latsim_scheduler(stream(200, 512, 128), num_gpu_blocks=100_000, max_num_seqs=64,
                                max_num_batched_tokens=8192, max_model_len=4096)
    assert [len(r.new) for r in recs[:4]] == [16, 16, 16, 16]
    assert recs[0].total_tokens == 8192
    assert recs[1].total_tokens == 8192 and recs[1].scheduled[-1][1] == 8192 - 16 - 15 * 512
    assert recs[4].scheduled[-1] == ("r63", 94)  # the last admitted finishes its chunked prompt
    assert len(recs[5].scheduled) == 64 and recs[5].total_tokens == 64
    assert all(len(r.scheduled) <= 64 and r.total_tokens <= 8192 for r in recs)


def test_long_prompt_is_chunked_at_the_budget():
    recs = run_latsim_scheduler(stream(1, 10_000, 4), num_gpu_blocks=10_000, max_num_seqs=8,
                                max_num_batched_tokens=4096, max_model_len=16_384)
    assert [r.scheduled[0][1] for r in recs[:4]] == [4096, 4096, 1808, 1]
    assert recs[2].finished == () and recs[-1].finished == ("r0",)


def test_preemption_takes_the_newest_running_request_and_it_resumes_first():
    # 4 requests of 32 prompt tokens need 2 blocks each at admission; 9 usable blocks (10 with
    # vLLM's null block).
    recs = run_latsim_scheduler(stream(4, 32, 40), num_gpu_blocks=10, max_num_seqs=8,
                                max_num_batched_tokens=512, max_model_len=512, enable_prefix_caching=False)
    first = next(r for r in recs if r.preempted)
    assert first.preempted == ("r3",)
    assert "r3" not in dict(first.scheduled)
    resumed = next(r for r in recs if r.step > first.step and "r3" in r.new)
    assert dict(resumed.scheduled)["r3"] > 1  # recomputes prompt + generated tokens
    done = [rid for r in recs for rid in r.finished]
    assert sorted(done) == ["r0", "r1", "r2", "r3"]


def test_prefix_group_hits_cached_blocks_but_recomputes_the_last_token():
    reqs = [StreamRequest("a", 0, 100, 2, 7, 64), StreamRequest("b", 3, 100, 2, 7, 64),
            StreamRequest("c", 3, 64, 2, 7, 64)]
    recs = run_latsim_scheduler(reqs, num_gpu_blocks=100, max_num_seqs=8, max_num_batched_tokens=512,
                                max_model_len=512)
    assert recs[0].cached_tokens == {"a": 0}
    assert recs[3].cached_tokens == {"b": 64, "c": 48}
    assert dict(recs[3].scheduled) == {"b": 36, "c": 16}


def test_without_chunked_prefill_a_prompt_that_does_not_fit_waits():
    reqs = [StreamRequest("a", 0, 300, 3), StreamRequest("b", 0, 300, 3)]
    recs = run_latsim_scheduler(reqs, num_gpu_blocks=100, max_num_seqs=8, max_num_batched_tokens=512,
                                max_model_len=512, enable_chunked_prefill=False)
    assert recs[0].scheduled == (("a", 300),)
    assert recs[1].scheduled == (("a", 1), ("b", 300))


def test_requests_longer_than_max_model_len_are_rejected():
    reqs = [StreamRequest("ok", 0, 100, 10), StreamRequest("long", 0, 500, 20)]
    recs = run_latsim_scheduler(reqs, num_gpu_blocks=100, max_num_seqs=8, max_num_batched_tokens=512,
                                max_model_len=512)
    assert recs[0].rejected == ("long",)
    assert all("long" not in dict(r.scheduled) for r in recs)


def test_the_pool_is_num_gpu_blocks_minus_vllms_null_block():
    reqs = [StreamRequest("a", 0, 17, 2), StreamRequest("b", 0, 16, 1)]
    recs = run_latsim_scheduler(reqs, num_gpu_blocks=3, max_num_seqs=4, max_num_batched_tokens=64,
                                max_model_len=32)
    assert recs[0].scheduled == (("a", 17),)  # a takes 2 blocks; the third is block 0
    assert ("b", 16) in recs[1].scheduled or ("b", 16) in recs[2].scheduled


@pytest.mark.parametrize("gate", [True, False])
def test_a_prompt_is_admitted_only_when_all_of_it_fits_unless_the_gate_is_off(gate):
    reqs = [StreamRequest("a", 0, 40, 30), StreamRequest("b", 0, 150, 10)]  # b needs 10 blocks, 8 are free
    recs = run_latsim_scheduler(reqs, num_gpu_blocks=12, max_num_seqs=4, max_num_batched_tokens=48,
                                max_model_len=192, scheduler_reserve_full_isl=gate)
    assert recs[0].scheduled == ((("a", 40),) if gate else (("a", 40), ("b", 8)))


def test_an_empty_prompt_is_rejected():
    reqs = [StreamRequest("empty", 0, 0, 3), StreamRequest("a", 0, 10, 2)]
    recs = run_latsim_scheduler(reqs, num_gpu_blocks=8, max_num_seqs=4, max_num_batched_tokens=64,
                                max_model_len=64)
    assert recs[0].rejected == ("empty",) and recs[0].scheduled == (("a", 10),)
