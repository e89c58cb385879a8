"""Build vLLM 0.25.1's v1 scheduler on the CPU over a KV pool of one or more groups.

The pieces :mod:`latsim.oracle.vllm_exact` needs from vLLM itself: importing it (log to stderr),
a stub model directory (a config.json is all ``ModelConfig`` reads), the ``Scheduler`` or
``AsyncScheduler`` with the engine's configuration objects, and the engine core's block hasher
for prefix caching.  Like :mod:`latsim.oracle.vllm_exact`, it imports from latsim only a
pure-Python module (:mod:`latsim.sim.kvlayout`, the groups' arithmetic): the differential oracle
runs it in vLLM's reference python, which has none of latsim's dependencies.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from latsim.sim.kvlayout import KvLayout

VOCAB_SIZE = 32000
"""Token ids of prompts and sampled tokens are drawn from ``[1, VOCAB_SIZE)``."""

_STUB_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 2,
    "vocab_size": VOCAB_SIZE,
    # Large, so that any max_model_len the caller asks for is accepted by ModelConfig.
    "max_position_embeddings": 1 << 22,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
}


def import_vllm() -> Any:
    """Import vLLM; on first import its log goes to stderr, warnings only, unless already set.

    vLLM logs to stdout by default, where latsim writes its results (``--json``); the
    ``VLLM_LOGGING_*`` variables are read once, when vLLM is first imported.
    """
    if "vllm" not in sys.modules:
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "run_vllm_scheduler needs vLLM 0.25.1 (CPU is enough); build the reference "
            "environment with .ci/vllm-ref.sh and run under its python"
        ) from exc
    return vllm


def oracle_layout(kw: Mapping[str, Any]) -> KvLayout:
    """The KV groups the keywords ``kv_full_groups`` / ``kv_sliding_groups`` / ``sliding_window``
    ask for (default one full-attention group), with vLLM's admission cap."""
    return KvLayout.for_engine(int(kw.get("kv_full_groups", 1)), int(kw.get("kv_sliding_groups", 0)),
                               int(kw.get("sliding_window", 0)), kw["max_num_batched_tokens"], kw["max_model_len"],
                               kw["block_size"])


def check_pool(num_gpu_blocks: int, block_size: int, max_model_len: int, layout: KvLayout | None = None) -> None:
    """Raise ``ValueError`` when vLLM would refuse to start with this KV pool."""
    # vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory: the engine refuses to start
    # unless one max_model_len sequence fits, i.e. num_blocks >= ceil(max_model_len / block)
    # (over the groups: each sliding one at most its admission cap).
    needed = (layout or KvLayout()).admission(max_model_len, block_size)
    if num_gpu_blocks < needed:
        raise ValueError(
            f"num_gpu_blocks {num_gpu_blocks} cannot hold one max_model_len={max_model_len} "
            f"sequence; vLLM refuses to start below {needed} blocks of {block_size} tokens"
        )


@functools.lru_cache(maxsize=1)
def _stub_model_dir() -> str:
    """A directory with a minimal llama ``config.json``: all ``ModelConfig`` needs."""
    path = Path(tempfile.mkdtemp(prefix="latsim-vllm-stub-"))
    (path / "config.json").write_text(json.dumps(_STUB_CONFIG))
    return str(path)


def build_vllm_scheduler(**kw: Any) -> Any:
    """vLLM's scheduler for ``num_gpu_blocks`` blocks in the groups :func:`oracle_layout` reads
    from ``kw`` (one full-attention group by default)."""
    import_vllm()
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, SlidingWindowSpec
    from vllm.v1.structured_output import StructuredOutputManager

    scheduler_config = SchedulerConfig.default_factory(
        max_num_seqs=kw["max_num_seqs"],
        max_num_batched_tokens=kw["max_num_batched_tokens"],
        max_model_len=kw["max_model_len"],
        enable_chunked_prefill=kw["enable_chunked_prefill"],
        long_prefill_token_threshold=kw["long_prefill_token_threshold"],
        scheduler_reserve_full_isl=kw["scheduler_reserve_full_isl"],
        watermark=kw["watermark"],
        async_scheduling=kw["async_scheduling"],
    )
    model_config = ModelConfig(
        model=_stub_model_dir(),
        dtype="bfloat16",
        skip_tokenizer_init=True,
        max_model_len=kw["max_model_len"],
    )
    cache_config = CacheConfig(
        block_size=kw["block_size"],
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=kw["enable_prefix_caching"],
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        device_config=DeviceConfig(device="cpu"),
    )
    vllm_config.cache_config.num_gpu_blocks = kw["num_gpu_blocks"]
    shape = dict(block_size=kw["block_size"], num_kv_heads=kw["num_kv_heads"], head_size=kw["head_dim"],
                 dtype=torch.bfloat16)
    layout = oracle_layout(kw)
    sliding = [KVCacheGroupSpec([f"sliding.{g}"], SlidingWindowSpec(**shape, sliding_window=layout.window))
               for g in range(layout.sliding)]  # the interleaved models' first layer slides: its groups come first
    full = [KVCacheGroupSpec([f"full.{g}"], FullAttentionSpec(**shape)) for g in range(layout.full)]
    kv_cache_config = KVCacheConfig(
        num_blocks=kw["num_gpu_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=sliding + full,
    )
    cls = AsyncScheduler if kw["async_scheduling"] else Scheduler
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=kw["block_size"],
        log_stats=True,
    )



def block_hasher(scheduler: Any) -> Any:
    """The engine core's block hasher (``EngineCore.__init__``): prefix-cache keys, or None."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    if not scheduler.cache_config.enable_prefix_caching:
        return None
    hash_fn = get_hash_fn_by_name(scheduler.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return get_request_block_hasher(scheduler.block_size, hash_fn)
