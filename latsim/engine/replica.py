"""One engine replica as a SimPy process: schedule a step, price it, advance the clock.

Design note.  The replica keeps its own float clock and advances it by exactly the priced
step times; SimPy orders the replica against the router (arrivals) and other replicas.  When
every running request is decoding and nothing can join the batch, the next steps differ only
in context length, so a *decode run* prices them in one vectorised call and jumps the clock to
the earliest of: the next arrival anywhere, the next completion, the step where the KV blocks
would run out, or the horizon.  A decode run applies exactly the float operations that
stepping one by one would (cumulative sums from the same clock, gaps as differences of step
end times), so both paths give identical results; tests compare them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

import numpy as np
import simpy

from latsim.costmodel.batch import BatchShape, CostModel
from latsim.engine.recorder import Recorder
from latsim.engine.request import Req


class Replica:
    """A serving engine instance: a scheduler, a cost model and a clock."""

    def __init__(self, env: simpy.Environment, index: int, scheduler, cost: CostModel, recorder: Recorder,
                 next_arrival: Callable[[], float], horizon_s: float, fast_forward: bool = True) -> None:
        self.env = env
        self.index = index
        self.scheduler = scheduler
        self.cost = cost
        self.recorder = recorder
        self.next_arrival = next_arrival
        self.horizon_s = horizon_s
        self.fast_forward = fast_forward
        self.clock = 0.0
        self.outstanding = 0
        self.peak_blocks_used = 0
        self._wake: simpy.Event | None = None

    def submit(self, req: Req) -> None:
        """Hand an arriving request to this replica (called by the router at its arrival time)."""
        req.replica = self.index
        self.scheduler.add_request(req)
        self.outstanding += 1
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def process(self) -> Generator[simpy.Event, None, None]:
        env = self.env
        while True:
            if not self.scheduler.has_work():
                self._wake = env.event()
                yield self._wake
                self._wake = None
                self.clock = env.now
            if self.clock > self.horizon_s:
                return
            if not (self.fast_forward and self._decode_run()):
                self._one_step()
            delay = self.clock - env.now
            yield env.timeout(delay if delay > 0.0 else 0.0)

    def _one_step(self) -> None:
        sched = self.scheduler
        plan = sched.schedule()
        start = self.clock
        for req in plan.new:
            if math.isnan(req.first_scheduled):
                req.first_scheduled = start
        self.peak_blocks_used = max(self.peak_blocks_used, sched.kv.pool.num_used)
        if not plan.scheduled:
            return
        end = start + self.cost.step_time(self._shape(plan))
        self.clock = end
        self.recorder.num_steps += 1
        self.outstanding -= len(sched.update(plan, end))

    @staticmethod
    def _shape(plan) -> BatchShape:
        """Aggregate a plan into the cost model's step shape (plain floats: this is hot)."""
        p_tokens = p_seqs = p_kv = d_seqs = d_kv = max_chunk = 0
        pairs = 0.0
        for req, n in plan.scheduled:
            ctx = req.num_computed
            if n == 1 and req.generated > 0 and ctx == req.num_tokens - 1:
                d_seqs += 1
                d_kv += ctx + 1
                continue
            p_tokens += n
            p_seqs += 1
            p_kv += ctx + n
            pairs += n * ctx + n * (n + 1) / 2
            max_chunk = max(max_chunk, n)
        return BatchShape(p_tokens, p_seqs, pairs, p_kv, d_seqs, d_kv, max_chunk)

    def _decode_run(self) -> bool:
        """Fast-forward a run of >= 1 decode-only steps; False when stepping one by one is needed."""
        sched = self.scheduler
        running = sched.running
        n_max = self._run_bound(sched, running)
        if n_max <= 0:
            return False
        b = len(running)
        computed = np.fromiter((r.num_computed for r in running), dtype=np.int64, count=b)
        blocks = np.fromiter((r.num_blocks for r in running), dtype=np.int64, count=b)
        bs = sched.kv.block_size
        n_max = self._kv_bound(computed, blocks, bs, n_max, sched.kv.num_free)
        if n_max <= 0:
            return False
        times = self.cost.decode_run(b, int(computed.sum()) + b, n_max)
        ends = np.cumsum(np.concatenate(([self.clock], times)))
        n = min(int(np.searchsorted(ends[:n_max], self.next_arrival(), "left")),
                int(np.searchsorted(ends[:n_max], self.horizon_s, "right")))
        if n <= 0:
            return False
        self._apply_run(running, computed, blocks, ends, n)
        return True

    def _run_bound(self, sched, running: list[Req]) -> int:
        """Steps until the first completion, or 0 when the batch may change before then."""
        if not running or not sched.all_decoding or len(running) > sched.limits.max_num_batched_tokens:
            return 0
        if sched.head_admissible(sched.limits.max_num_batched_tokens - len(running)):
            return 0
        return min(r.target - r.generated for r in running)

    @staticmethod
    def _kv_bound(computed: np.ndarray, blocks: np.ndarray, bs: int, n_max: int, free: int) -> int:
        """Largest ``n <= n_max`` whose block allocations all fit in ``free`` blocks."""
        def taken(n: int) -> int:
            return int(np.maximum(0, -(-(computed + n) // bs) - blocks).sum())
        if taken(n_max) <= free:
            return n_max
        lo, hi = 0, n_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if taken(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _apply_run(self, running: list[Req], computed: np.ndarray, blocks: np.ndarray,
                   ends: np.ndarray, n: int) -> None:
        sched, rec = self.scheduler, self.recorder
        bs = sched.kv.block_size
        end = float(ends[n])
        first_end = float(ends[1])
        rec.gaps(np.diff(ends[1:n + 1]), len(running))
        new_blocks = np.maximum(blocks, -(-(computed + n) // bs))
        sched.kv.pool.take(int((new_blocks - blocks).sum()))
        finished = []
        for r, nb in zip(running, new_blocks.tolist()):
            rec.gap(first_end - r.last_token)
            r.num_computed += n
            r.generated += n
            r.num_blocks = nb
            r.last_token = end
            if r.generated >= r.target:
                finished.append(r)
        self.clock = end
        rec.num_steps += n
        self.peak_blocks_used = max(self.peak_blocks_used, sched.kv.pool.num_used)
        if finished:
            sched.retire(finished, end)
            self.outstanding -= len(finished)

