"""KV-cache groups when some layers slide: the layout's arithmetic, vLLM's grouping rule, the
grouped KV manager's block accounting and the memory plan built on them."""

from __future__ import annotations

import numpy as np
import pytest

from latsim.catalog import load_device, load_model
from latsim.catalog.hf_config import parse_hf_config
from latsim.deployment import Deployment, EngineConfig, resolve_engine
from latsim.engines.vllm.engine import limits_for
from latsim.engines.vllm.fastsched import FastVllmScheduler
from latsim.engines.vllm.kvgroups import KvGroups, kv_groups
from latsim.engines.vllm.memory import DoesNotFitError, plan_memory
from latsim.sim.kvlayout import KvLayout
from latsim.sim.kvmanager import KVManager, kv_manager
from latsim.sim.request import Req
from tests.catalog.test_multimodal import gemma3_27b

BS = 16


def test_layout_arithmetic_follows_vllms_sliding_window_manager() -> None:
    layout = KvLayout(1, 6, 1024, KvLayout.sliding_admission_blocks(1024, 8192, 131072, BS))
    assert layout.admission_blocks == -(-(1023 + 8192) // BS) + 1  # window - 1 + one step's tokens, + 1
    assert layout.skipped(1022, BS) == 0  # every computed token is still in the window of the next
    assert layout.skipped(1023 + 16, BS) == 1  # tokens 0-15 are before the next token's window
    assert layout.held(slots=100, skipped=30) == 100 + 6 * 70
    assert layout.admission(131072, BS) == 8192 + 6 * layout.admission_blocks
    assert KvLayout().admission(100, BS) == 7 and KvLayout().skipped(10**6, BS) == 0


@pytest.mark.parametrize(("kw", "match"), [
    (dict(full=0, sliding=0), "at least one group"),
    (dict(full=1, sliding=1, window=0, admission_blocks=4), "need a window"),
    (dict(full=1, sliding=0, window=64), "need a window"),
    (dict(full=1, sliding=1, window=64, admission_blocks=0), "admission_blocks"),
])
def test_bad_layouts_are_refused(kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        KvLayout(**kw)


@pytest.mark.parametrize(("model", "groups"), [
    ("llama-3.1-8b", KvGroups(32, 1, 0, 0, 32)),
    ("mistral-7b", KvGroups(32, 0, 1, 4096, 32)),  # v0.1: every layer slides, one group
    ("gemma-2-9b", KvGroups(21, 1, 1, 4096, 42)),  # 21 full and 21 sliding layers
    ("gemma-2-27b", KvGroups(23, 1, 1, 4096, 46)),
])
def test_catalog_models_group_as_vllm_groups_them(model, groups) -> None:
    assert kv_groups(load_model(model)) == groups


def test_gemma3_groups_are_padded_to_the_full_layers_count() -> None:
    """vLLM's rule: 10 full and 52 sliding layers -> groups of 10: 1 full, 6 sliding (8 padding layers)."""
    assert kv_groups(parse_hf_config(gemma3_27b(), "g3")) == KvGroups(10, 1, 6, 1024, 62)
    cfg = gemma3_27b()
    cfg["text_config"] = {**cfg["text_config"], "num_hidden_layers": 7,
                          "layer_types": ["sliding_attention"] * 4 + ["full_attention"] * 3}
    assert kv_groups(parse_hf_config(cfg, "g3")) == KvGroups(4, 1, 1, 1024, 7)  # 4 < 1.5 x 3: the larger count
    cfg["text_config"]["layer_types"] = ["sliding_attention"] * 5 + ["full_attention"] * 2
    assert kv_groups(parse_hf_config(cfg, "g3")) == KvGroups(2, 1, 3, 1024, 7)  # 5 >= 1.5 x 2: padded to 6


def decode(kv: KVManager, req: Req, steps: int) -> None:
    """``steps`` decode steps of ``req`` as the scheduler makes them: allocate, then compute."""
    for _ in range(steps):
        assert kv.allocate(req, 1)
        req.num_computed += 1
        req.generated += 1


def test_a_sliding_table_stops_growing_once_past_the_window() -> None:
    layout = KvLayout(1, 2, 64, KvLayout.sliding_admission_blocks(64, 256, 1024, BS))
    kv = kv_manager(1000, BS, 1024, False, layout)
    req = Req(0, 0.0, 40, 500)
    assert kv.allocate(req, 40)
    req.num_computed = 40
    assert kv.pool.num_used == 3 * 3
    decode(kv, req, 400)
    slots = -(-441 // BS)
    assert req.num_blocks == slots
    assert req.skipped == (440 - 64 + 1) // BS
    assert kv.held(req) == kv.pool.num_used == slots + 2 * (slots - req.skipped)
    assert slots - req.skipped <= 64 // BS + 1  # a sliding table holds the window and one block
    kv.free(req, preempted=False)
    assert kv.pool.num_free == 1000 and kv.pool.runs() == [(None, 1000)]


@pytest.mark.parametrize("caching", [False, True])
def test_random_requests_give_every_block_back(caching: bool) -> None:
    """Whatever mix of windows, hits, chunks and preemptions: blocks held (a shared cached block
    once) equal the pool's used ones at every step, and all come back."""
    rng = np.random.default_rng(5)
    for layout in (KvLayout(1, 6, 100, 30), KvLayout(0, 1, 48, 12), KvLayout(2, 1, 32, 10)):
        kv = kv_manager(5000, BS, 2048, caching, layout)
        live: list[Req] = []
        for i in range(300):
            if live and rng.random() < 0.3:
                req = live.pop(int(rng.integers(0, len(live))))
                kv.free(req, preempted=bool(rng.random() < 0.3))
                continue
            req = Req(i, 0.0, int(rng.integers(1, 300)), 50, int(rng.integers(-1, 2)), 64)
            hits = kv.lookup(req)
            chunk = int(rng.integers(1, req.num_tokens - hits * BS + 1))
            if not kv.allocate(req, chunk, hits):
                continue
            req.num_computed += chunk
            if req.num_computed == req.num_tokens:
                decode(kv, req, int(rng.integers(0, 40)))
            live.append(req)
            shared = sum(c.refs - 1 for copies in kv.pool._copies.values() for c in copies if c.refs > 1)
            assert sum(kv.held(r) for r in live) - shared == kv.pool.num_used
        for req in live:
            kv.free(req, preempted=False)
        assert kv.pool.num_free == 5000


def test_the_admission_gate_caps_each_sliding_table() -> None:
    layout = KvLayout(1, 6, 64, KvLayout.sliding_admission_blocks(64, 128, 4096, BS))
    kv = kv_manager(10_000, BS, 4096, False, layout)
    req = Req(0, 0.0, 3000, 10)
    slots = -(-3000 // BS)
    assert kv.admission_blocks(req) == slots + 6 * layout.admission_blocks < 7 * slots


def h200(model, **engine) -> Deployment:
    return Deployment(model=model, device=load_device("h200"), engine=EngineConfig(**engine))


def test_gemma3_pool_blocks_hold_one_group_and_a_long_request_holds_the_window() -> None:
    d = h200(parse_hf_config(gemma3_27b(), "g3"))
    plan = plan_memory(d)
    per_layer = plan.kv_bytes_per_token / 62
    assert plan.num_blocks == int(plan.kv_bytes // (per_layer * 10 * BS))
    engine = resolve_engine(d)
    per_request = 8192 + 6 * KvLayout.sliding_admission_blocks(1024, engine.max_num_batched_tokens, 131072, BS)
    assert plan.kv_capacity_tokens == int(plan.num_blocks / per_request * 131072)
    assert plan.kv_capacity_tokens > 3 * plan.kv_bytes / plan.kv_bytes_per_token  # every layer counted: 3x+ less
    limits = limits_for(engine, plan)
    assert limits.kv_layout == plan.kv_layout(engine.max_num_batched_tokens)
    assert limits.kv_layout.sliding == 6 and FastVllmScheduler(limits, plan.num_blocks).cohort.sliding == 6


def test_a_long_context_fits_when_only_the_full_layers_hold_all_of_it() -> None:
    """Gemma-3-27B at 131072 tokens on one H100: every layer's KV for one such request would not
    fit beside the weights, the full layers' plus the windows' does (vLLM's start-up check)."""
    model = parse_hf_config(gemma3_27b(), "g3")
    plan = plan_memory(Deployment(model=model, device=load_device("h100")))
    assert plan.max_model_len == 131072
    assert plan.kv_bytes < 131072 * plan.kv_bytes_per_token
    with pytest.raises(DoesNotFitError, match=r"--max-model-len \d+"):
        tighter = EngineConfig(gpu_memory_utilization=0.8)
        plan_memory(Deployment(model=model, device=load_device("h100"), engine=tighter))


def test_models_without_sliding_layers_plan_as_before() -> None:
    plan = plan_memory(h200(load_model("llama-3.1-8b")))
    assert plan.kv_capacity_tokens == plan.num_blocks * BS
    assert plan.num_blocks == int(plan.kv_bytes // (plan.kv_bytes_per_token * BS))
    assert plan.kv_layout(8192) == KvLayout()


def test_the_pool_in_tokens_by_request_length() -> None:
    """Without sliding layers every figure is ``num_blocks x block_size``; with them short requests
    hold a block per group for every 16 tokens, long ones only the window in the sliding groups."""
    llama = plan_memory(h200(load_model("llama-3.1-8b")))
    assert llama.kv_tokens_at(100) == llama.kv_tokens_unwindowed == llama.kv_capacity_tokens
    gemma = plan_memory(h200(parse_hf_config(gemma3_27b(), "g3")))
    short, long = gemma.kv_tokens_at(512), gemma.kv_tokens_at(65536)
    assert short == pytest.approx(gemma.num_blocks * BS / 7, rel=0.01)  # 7 tables, every token in each
    assert gemma.kv_tokens_unwindowed == gemma.num_blocks * BS * 10 // 62  # every layer keeping every token
    assert short < gemma.kv_tokens_unwindowed < long < gemma.num_blocks * BS  # the windows stop growing
