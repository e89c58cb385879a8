"""latsim's scheduler against vLLM 0.25.1's own, step by step, on seeded random streams.

Each family (``tests/differential/streams.py``) goes through both schedulers; a test fails
with a report of the first differing step of the first few differing streams. The findings of
``docs/differential-findings.md`` (F1-F6) are all fixed; their minimal streams stay as tests.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from dataclasses import replace

import pytest

from latsim.oracle.differential import check_cases, latsim_records
from latsim.oracle.steprecord import StepRecord
from tests.differential.streams import DECODE_CONFIG, REPROS, decode_stream


def assert_same(cases, expected, show: int = 3) -> None:
    failures = check_cases(cases, expected)
    assert not failures, f"{len(failures)} of {len(cases)} streams differ:\n\n" + "\n\n".join(failures[:show])


def oracle_pair(oracle, family: str):
    cases, records, _ = oracle(family)
    return cases, records


def tokens_per_request(records: list[StepRecord]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for rec in records:
        for rid, n in rec.scheduled:
            totals[rid] += n
    return totals


# --- synchronous scheduling: identical today ------------------------------------------------


@pytest.mark.oracle_cases("bursts")
def test_bursts(oracle):
    assert_same(*oracle_pair(oracle, "bursts"))


@pytest.mark.oracle_cases("arrivals")
def test_random_arrivals(oracle):
    assert_same(*oracle_pair(oracle, "arrivals"))


@pytest.mark.oracle_cases("long_prompts")
def test_long_prompts_chunked_over_several_steps(oracle):
    cases, expected = oracle_pair(oracle, "long_prompts")
    budget = [c.config["max_num_batched_tokens"] for c in cases]
    budget_steps = sum(r.total_tokens == b for b, rs in zip(budget, expected, strict=True) for r in rs)
    assert budget_steps > 100  # the family does chunk prompts at the budget
    assert_same(cases, expected)


@pytest.mark.oracle_cases("seq_cap")
def test_max_num_seqs_cap(oracle):
    cases, expected = oracle_pair(oracle, "seq_cap")
    cap = [c.config["max_num_seqs"] for c in cases]
    at_cap = sum(len(r.scheduled) == n for n, rs in zip(cap, expected, strict=True) for r in rs)
    assert at_cap > 100
    assert_same(cases, expected)


@pytest.mark.oracle_cases("prefix_groups")
def test_prefix_cache_hits_of_prefix_groups(oracle):
    cases, expected = oracle_pair(oracle, "prefix_groups")
    assert sum(bool(r.cached_tokens) for rs in expected for r in rs) > 50
    assert_same(cases, expected)


@pytest.mark.oracle_cases("max_model_len")
def test_max_model_len_rejections_and_caps(oracle):
    cases, expected = oracle_pair(oracle, "max_model_len")
    assert sum(len(r.rejected) for rs in expected for r in rs) > 20
    assert_same(cases, expected)


@pytest.mark.oracle_cases("no_chunking")
def test_without_chunked_prefill(oracle):
    assert_same(*oracle_pair(oracle, "no_chunking"))


@pytest.mark.oracle_cases("kv_pressure")
def test_kv_pressure_preemption_and_resume(oracle):
    """Preemptions, recompute and head-of-line blocking, with F1 and F2 cancelled by knobs."""
    cases, expected = oracle_pair(oracle, "kv_pressure")
    assert sum(len(r.preempted) for rs in expected for r in rs) > 40
    assert_same(cases, expected)


@pytest.mark.oracle_cases("sliding_pressure")
def test_sliding_window_groups_under_kv_pressure(oracle):
    """Sliding-window KV-cache groups (Gemma-2's 1 + 1, Gemma-3's 1 + 6, all sliding, 2 + 1) in
    tight pools: blocks freed behind the window, the admission cap, preemption, both scheduler loops."""
    cases, expected = oracle_pair(oracle, "sliding_pressure")
    assert sum(len(r.preempted) for rs in expected for r in rs) > 40
    outgrown = sum(1 for c in cases for r in c.stream if r.prompt_tokens + r.output_tokens > c.config["sliding_window"])
    assert outgrown > 300  # most requests outgrow their window, so blocks are freed behind it
    assert_same(cases, expected)


@pytest.mark.oracle_cases("sliding_cached")
def test_sliding_window_groups_with_prefix_cache_hits(oracle):
    """Shared prefixes over sliding-window groups with room to spare: the same hits and steps."""
    cases, expected = oracle_pair(oracle, "sliding_cached")
    assert sum(1 for rs in expected for r in rs for n in r.cached_tokens.values() if n > 0) > 50
    assert_same(cases, expected)


@pytest.mark.oracle_cases("sliding_cached_pressure")
def test_sliding_window_groups_with_prefix_caching_under_kv_pressure(oracle):
    """Shared prefixes, evictions and resumed requests over sliding-window groups: findable
    blocks in every group, vLLM's hybrid hit rule (windows a multiple of the block size: see
    ``latsim.sim.kvgrouped`` for the one difference left otherwise)."""
    cases, expected = oracle_pair(oracle, "sliding_cached_pressure")
    assert sum(len(r.preempted) for rs in expected for r in rs) > 40
    assert sum(1 for rs in expected for r in rs for n in r.cached_tokens.values() if n > 0) > 50
    assert_same(cases, expected)


# --- synchronous scheduling: known semantic differences -------------------------------------


@pytest.mark.oracle_cases("kv_pressure_exact")
def test_kv_pressure_exact_configuration(oracle):
    assert_same(*oracle_pair(oracle, "kv_pressure_exact"))


@pytest.mark.oracle_cases("kv_pressure_cached")
def test_kv_pressure_with_prefix_caching(oracle):
    assert_same(*oracle_pair(oracle, "kv_pressure_cached"))


@pytest.mark.oracle_cases("prefix_pressure")
def test_prefix_groups_under_kv_pressure(oracle):
    assert_same(*oracle_pair(oracle, "prefix_pressure"))


@pytest.mark.oracle_cases("repros")
@pytest.mark.parametrize(
    "finding",
    ["F1", "F2", "F3", "F4", "F5", "F6"],
)
def test_finding_minimal_stream(oracle, finding):
    """Each finding's stream (F3-F6 with F1 and F2 neutralised while latsim still has them)."""
    cases, expected = oracle_pair(oracle, "repros")
    index = list(REPROS).index(finding)
    assert_same([cases[index]], [expected[index]])


# --- asynchronous scheduling ------------------------------------------------------------------


@pytest.mark.oracle_cases("async_mix")
def test_async_scheduling(oracle):
    assert_same(*oracle_pair(oracle, "async_mix"))


@pytest.mark.oracle_cases("async_mix")
def test_async_scheduling_schedules_the_same_tokens_per_request(oracle):
    """Without preemption async vLLM schedules each request what latsim (sync) does: P + n - 1."""
    cases, expected = oracle_pair(oracle, "async_mix")
    compared = 0
    for case, vllm in zip(cases, expected, strict=True):
        if any(r.preempted for r in vllm):
            continue
        sync = latsim_records(replace(case, config={**case.config, "async_scheduling": False}))
        if any(r.preempted for r in sync):
            continue
        assert tokens_per_request(sync) == tokens_per_request(vllm), case.label
        assert [rid for r in sync for rid in r.new] == [rid for r in vllm for rid in r.new], case.label
        compared += 1
    assert compared > 200


# --- the oracle itself and the speed bar ---------------------------------------------------------


def test_oracle_smoke_suite():
    """The adapter's own smoke tests (they import vLLM) pass under the reference python."""
    from latsim.oracle.differential import REPO_ROOT
    from tests.differential.conftest import require_reference_python

    python = require_reference_python()
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/differential/oracle"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


@pytest.mark.oracle_cases("speed")
def test_latsim_and_vllms_scheduler_take_the_same_steps_on_the_speed_stream(oracle):
    """The 64-sequence decode stream (about 1,030 steps) both sides time: the same step count.

    The per-step cost ratio is printed, not asserted (CI's machine is loaded; speed targets
    live in ``bench/``): it was 50x and more when measured on an idle machine.

    latsim's side is the whole simulator as users run it (``simulate``, fast engine, a trivial
    cost model); vLLM's is its scheduler alone through the adapter, timed inside the bridge.
    """
    import numpy as np

    from latsim.sim.simulate import simulate
    from latsim.workload.trace import RequestTrace
    from tests.sim.conftest import LinearCost, small_deployment

    _, (vllm,), vllm_seconds = oracle("speed")
    deployment = small_deployment(**DECODE_CONFIG)
    n = len(decode_stream())
    trace = RequestTrace.from_arrays(np.zeros(n), np.full(n, 512), np.full(n, 1024))
    best, steps = float("inf"), 0
    for _ in range(3):
        start = time.perf_counter()
        steps = simulate(deployment, trace, cost_model=LinearCost()).summary["engine_steps"]
        best = min(best, time.perf_counter() - start)
    assert abs(steps - len(vllm)) <= 1
    ratio = (vllm_seconds / len(vllm)) / (best / steps)
    print(f"latsim {1e6 * best / steps:.1f} us/step, vLLM {1e3 * vllm_seconds / len(vllm):.3f} ms/step: {ratio:.0f}x")
