"""KV blocks: what goes back to the free queue, in which order, and what a take would evict."""

from __future__ import annotations

from latsim.sim.kvcache import BlockPool
from latsim.sim.kvmanager import KVManager
from latsim.sim.request import Req


def queue(pool: BlockPool) -> list:
    """The free queue as (key, live) runs, front first."""
    return pool.runs()


def computed_request(kv: KVManager, prompt: int = 64, group: int = 0, prefix: int = 32) -> Req:
    req = Req(7, 0.0, prompt, 10, group, prefix, kv.block_size)
    assert kv.allocate(req, prompt)
    req.num_computed = prompt
    return req


def test_a_finished_request_returns_its_tail_anonymously_then_its_prefix_last_block_first():
    kv = KVManager(10, 16, 512, prefix_caching=True)
    kv.free(computed_request(kv), preempted=False)
    assert queue(kv.pool) == [(None, 8), (("g", 0, 1), 1), (("g", 0, 0), 1)]  # the tail merges


def test_a_preempted_request_keeps_its_computed_blocks_findable():
    kv = KVManager(10, 16, 512, prefix_caching=True)
    kv.free(computed_request(kv), preempted=True)
    assert queue(kv.pool) == [(None, 6), (("r", 7, 3), 1), (("r", 7, 2), 1), (("g", 0, 1), 1), (("g", 0, 0), 1)]


def test_without_prefix_caching_everything_goes_back_as_one_run():
    kv = KVManager(10, 16, 512, prefix_caching=False)
    kv.free(computed_request(kv), preempted=True)
    assert queue(kv.pool) == [(None, 10)]


def test_evicts_key_looks_only_as_far_as_the_blocks_taken():
    kv = KVManager(10, 16, 512, prefix_caching=True)
    kv.free(computed_request(kv), preempted=False)
    assert not kv.pool.evicts_key(8)
    assert kv.pool.evicts_key(9)
    kv.pool.touch(("g", 0, 0))
    kv.pool.touch(("g", 0, 1))
    assert not kv.pool.evicts_key(8)


def test_a_partial_last_block_goes_to_the_front_of_the_queue():
    kv = KVManager(10, 16, 512, prefix_caching=True)
    kv.free(computed_request(kv, prompt=32), preempted=False)  # two group blocks, cached at the tail
    assert queue(kv.pool) == [(None, 8), (("g", 0, 1), 1), (("g", 0, 0), 1)]
    kv.free(computed_request(kv, prompt=40, group=-1), preempted=False)  # 2 full blocks + 1 partial
    assert queue(kv.pool) == [(None, 6), (("g", 0, 1), 1), (("g", 0, 0), 1), (None, 2)]


def test_duplicate_content_is_cached_as_another_copy_and_found_while_one_survives():
    pool = BlockPool(4)
    key = ("g", 0, 0)
    pool.take(2)
    first, second = pool.register(key), pool.register(key)
    pool.release([first, second])
    assert pool.runs() == [(None, 2), (key, 1), (key, 1)]
    pool.take(3)  # evicts the first copy only
    assert pool.is_cached(key) and pool.is_queued(key)
    assert pool.touch(key) is second and pool.num_free == 0
    assert not pool.is_queued(key)
