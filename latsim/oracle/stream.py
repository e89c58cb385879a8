"""Drive latsim's scheduler over a step-indexed request stream, recording every decision.

The counterpart of :mod:`latsim.oracle.vllm_exact` (vLLM's own scheduler): both take the same
:class:`StreamRequest` list and return :class:`StepRecord` lists, so differential tests can
compare them step by step.  No clock and no cost model: steps are counted, not timed.
Arrivals of step ``s`` are added just before step ``s`` is scheduled, in either mode.
"""

from __future__ import annotations

from collections import defaultdict

from latsim.engines.vllm.scheduler import SchedulerLimits, VllmScheduler
from latsim.oracle.steprecord import StepRecord, StreamRequest
from latsim.sim.kvlayout import KvLayout
from latsim.sim.request import FINISHED, REJECTED, Req
from latsim.sim.router import rejected_by_engine
from latsim.sim.step import StepPlan


def run_latsim_scheduler(stream: list[StreamRequest], *, num_gpu_blocks: int, block_size: int = 16,
                         max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                         enable_chunked_prefill: bool = True, enable_prefix_caching: bool = True,
                         scheduler_reserve_full_isl: bool = True, async_scheduling: bool = False,
                         kv_full_groups: int = 1, kv_sliding_groups: int = 0, sliding_window: int = 0,
                         max_steps: int = 100_000) -> list[StepRecord]:
    """Step latsim's vLLM scheduler over ``stream`` until every request is done or rejected.

    ``num_gpu_blocks`` counts vLLM's null block, as vLLM's log does.  With
    ``async_scheduling`` the engine learns that a request finished one step after the step
    that produced its last token (vLLM applies that output after scheduling the next step),
    so the run ends with one more idle step, as vLLM's does; ``finished`` still lists a
    request on the step that produced its last token.  ``kv_full_groups`` /
    ``kv_sliding_groups`` / ``sliding_window``: the KV-cache groups, as for vLLM's side
    (:func:`~latsim.oracle.vllm_exact.run_vllm_scheduler`).
    """
    limits = SchedulerLimits(max_num_seqs, max_num_batched_tokens, max_model_len, block_size,
                             enable_chunked_prefill, enable_prefix_caching,
                             scheduler_reserve_full_isl=scheduler_reserve_full_isl,
                             async_scheduling=async_scheduling,
                             kv_layout=KvLayout.for_engine(kv_full_groups, kv_sliding_groups, sliding_window,
                                                           max_num_batched_tokens, max_model_len, block_size))
    sched = VllmScheduler(limits, num_gpu_blocks)
    arrivals: dict[int, list[tuple[str, Req]]] = defaultdict(list)
    for i, s in enumerate(stream):
        req = Req(i, float(s.arrival_step), s.prompt_tokens, s.output_tokens, s.prefix_group,
                  s.prefix_tokens, block_size)
        arrivals[s.arrival_step].append((s.request_id, req))
    names = {id(req): rid for batch in arrivals.values() for rid, req in batch}
    pending, records, step, reported = len(stream), [], 0, 0
    while pending and step < max_steps:
        rejected = []
        for rid, req in arrivals.pop(step, []):
            if rejected_by_engine(req.prompt, req.target, max_model_len):
                req.state = REJECTED
                rejected.append(rid)
                pending -= 1
            else:
                sched.add_request(req)
        plan = sched.schedule()
        pending -= reported  # async: the previous step's finishes reach the engine now
        cached = {names[id(r)]: r.num_computed for r in plan.new}
        finished = sched.update(plan, float(step)) if plan.scheduled else []
        done = sum(1 for r in finished if r.state == FINISHED)
        if async_scheduling:
            reported = done
        else:
            pending -= done
        records.append(_record(step, plan, finished, rejected, cached, names))
        step += 1
    return records


def _record(step: int, plan: StepPlan, finished: list[Req], rejected: list[str], cached: dict[str, int],
            names: dict[int, str]) -> StepRecord:
    return StepRecord(
        step=step,
        scheduled=tuple((names[id(r)], n) for r, n in plan.scheduled),
        new=tuple(names[id(r)] for r in plan.new),
        preempted=tuple(names[id(r)] for r in plan.preempted),
        finished=tuple(names[id(r)] for r in finished),
        rejected=tuple(rejected),
        cached_tokens=cached,
    )
