"""Smoke tests of the vLLM oracle: the adapter reproduces vLLM 0.25.1's known step patterns.

The rules checked here are written up in docs/vllm-v1-scheduling.md.
"""

from __future__ import annotations

from collections import Counter

from latsim.oracle.steprecord import StepRecord, StreamRequest

ISSUE_EXAMPLE = dict(num_gpu_blocks=4096, max_num_seqs=64, max_num_batched_tokens=8192, max_model_len=4096)


def issue_stream() -> list[StreamRequest]:
    """200 requests of 512 prompt / 128 output tokens, all arriving before the first step."""
    return [StreamRequest(f"r{i}", 0, 512, 128) for i in range(200)]


def scheduled_per_request(records: list[StepRecord]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for rec in records:
        for rid, n in rec.scheduled:
            totals[rid] += n
    return totals


def finished_once(records: list[StepRecord], stream: list[StreamRequest]) -> bool:
    done = [rid for rec in records for rid in rec.finished]
    return sorted(done) == sorted(r.request_id for r in stream)


def test_issue_example_fills_budget_then_decodes_64(run_vllm):
    stream = issue_stream()
    records = run_vllm(stream, **ISSUE_EXAMPLE)

    assert [r.step for r in records] == list(range(len(records)))
    assert [r.total_tokens for r in records[:4]] == [8192] * 4
    assert [len(r.scheduled) for r in records[:4]] == [16, 32, 48, 64]
    assert records[0].scheduled == tuple((f"r{i}", 512) for i in range(16))
    # Step 1: the 16 first requests decode first, then 15 whole prompts and one chunk of 496.
    assert records[1].scheduled[:16] == tuple((f"r{i}", 1) for i in range(16))
    assert records[1].scheduled[-1] == ("r31", 8192 - 16 - 15 * 512)
    assert all(r.total_tokens == 64 and len(r.scheduled) == 64 for r in records[5:127])
    assert len(records) == 512
    assert not any(r.preempted or r.rejected for r in records)
    assert finished_once(records, stream)
    assert set(scheduled_per_request(records).values()) == {512 + 128 - 1}


def test_async_scheduling_wastes_no_tokens_but_frees_a_step_later(run_vllm):
    stream = issue_stream()
    sync = run_vllm(stream, **ISSUE_EXAMPLE)
    async_ = run_vllm(stream, **ISSUE_EXAMPLE, async_scheduling=True)

    assert [r.scheduled for r in async_[:6]] == [r.scheduled for r in sync[:6]]
    assert set(scheduled_per_request(async_).values()) == {512 + 128 - 1}
    assert finished_once(async_, stream)
    # A finished request still holds its slot while the next step is scheduled.
    assert len(async_) > len(sync)


def replay_token_accounting(records: list[StepRecord], stream: list[StreamRequest]) -> dict[str, int]:
    """Replay the records as a model runner would; return tokens generated per request.

    Checks on the way that every (re)admission prefills exactly the request's known tokens
    (prompt + tokens generated before its preemption), minus its prefix-cache hits.
    """
    prompt = {r.request_id: r.prompt_tokens for r in stream}
    generated = dict.fromkeys(prompt, 0)
    computed = dict.fromkeys(prompt, 0)
    for rec in records:
        for rid in rec.new:
            computed[rid] = rec.cached_tokens.get(rid, 0)
            chunk = dict(rec.scheduled)[rid]
            assert computed[rid] + chunk == prompt[rid] + generated[rid], (rec.step, rid)
        for rid, n in rec.scheduled:
            computed[rid] += n
            if computed[rid] == prompt[rid] + generated[rid]:
                generated[rid] += 1
        for rid in rec.preempted:
            computed[rid] = 0
    return generated


def test_kv_pressure_preempts_the_newest_and_recomputes(run_vllm):
    stream = [StreamRequest(f"r{i}", 0, 100, 200) for i in range(8)]
    records = run_vllm(
        stream, num_gpu_blocks=64, max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=1024
    )

    preempting = [r for r in records if r.preempted]
    assert preempting, "64 blocks cannot hold 8 sequences of 300 tokens"
    assert preempting[0].preempted == ("r7",)  # the tail of the running queue
    assert all(not r.new for r in preempting)  # no admission in a step that preempted
    victims = {rid for r in preempting for rid in r.preempted}
    resumed = {rid for r in records for rid in r.new if r.step > preempting[0].step}
    assert victims <= resumed
    assert any(r.cached_tokens.get(rid, 0) > 0 for r in records for rid in r.new if rid in victims)
    assert replay_token_accounting(records, stream) == dict.fromkeys([r.request_id for r in stream], 200)
    assert finished_once(records, stream)


def test_prefix_group_hits_full_blocks_even_within_one_step(run_vllm):
    stream = [StreamRequest(f"p{i}", 0, 300, 4, prefix_group=0, prefix_tokens=256) for i in range(3)]
    stream += [
        StreamRequest("same0", 0, 256, 4, prefix_group=1, prefix_tokens=256),
        StreamRequest("same1", 0, 256, 4, prefix_group=1, prefix_tokens=256),
        StreamRequest("late", 5, 300, 4, prefix_group=0, prefix_tokens=256),
    ]
    limits = dict(num_gpu_blocks=200, max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=1024)
    records = run_vllm(stream, **limits)

    first = records[0]
    assert first.new == ("p0", "p1", "p2", "same0", "same1")
    # Blocks are hashed when allocated, so p1 and p2 hit p0's prefix in the same step.
    # An entire-prompt hit is capped at prompt - 1 tokens: the last block is recomputed.
    assert first.cached_tokens == {"p1": 256, "p2": 256, "same1": 240}
    assert dict(first.scheduled) == {"p0": 300, "p1": 44, "p2": 44, "same0": 256, "same1": 16}
    assert records[5].new == ("late",) and records[5].cached_tokens == {"late": 256}

    uncached = run_vllm(stream, **limits, enable_prefix_caching=False)
    assert not any(r.cached_tokens for r in uncached)


def test_long_prompt_is_chunked_at_the_token_budget(run_vllm):
    stream = [StreamRequest("long", 0, 5000, 3), StreamRequest("short", 1, 10, 5)]
    records = run_vllm(
        stream, num_gpu_blocks=400, max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=6000
    )

    assert [r.scheduled for r in records[:4]] == [
        (("long", 2048),),
        (("long", 2048),),  # running requests first: the new arrival finds no budget left
        (("long", 904), ("short", 10)),
        (("long", 1), ("short", 1)),
    ]
    assert records[4].finished == ("long",)


def test_without_chunked_prefill_a_prompt_waits_for_a_whole_budget(run_vllm):
    stream = [StreamRequest("a", 0, 3000, 3), StreamRequest("b", 0, 3000, 3)]
    records = run_vllm(
        stream,
        num_gpu_blocks=600,
        max_num_seqs=8,
        max_num_batched_tokens=4096,
        max_model_len=4096,
        enable_chunked_prefill=False,
    )
    assert [r.scheduled for r in records[:2]] == [(("a", 3000),), (("a", 1), ("b", 3000))]


def test_front_end_rejects_what_does_not_fit_max_model_len(run_vllm):
    stream = [
        StreamRequest("fits", 0, 1000, 24),
        StreamRequest("too_long", 0, 1000, 25),
        StreamRequest("prompt_at_limit", 1, 1024, 1),
    ]
    records = run_vllm(
        stream, num_gpu_blocks=400, max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=1024
    )

    assert records[0].rejected == ("too_long",) and records[1].rejected == ("prompt_at_limit",)
    assert set(scheduled_per_request(records)) == {"fits"}
    assert finished_once(records, stream[:1])
