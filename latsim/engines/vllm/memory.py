"""The engine's memory plan: what the weights, activations and graphs leave for the KV cache.

Follows vLLM's start-up arithmetic (see ``data/engines/vllm/memory.yaml``) per GPU of a tensor-
parallel group, and reports every term so users can compare with the engine's own log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import yaml

from latsim.catalog.models import DTYPE_BYTES, ModelSpec
from latsim.catalog.sizing import weight_bytes
from latsim.deployment import Deployment, EngineConfig, resolve_engine
from latsim.engines.vllm.advice import fit_advice
from latsim.engines.vllm.kvgroups import KvGroups, kv_groups
from latsim.paths import engine_data
from latsim.sim.kvlayout import KvLayout, cdiv

GIB = 2**30


class DoesNotFitError(ValueError):
    """The model cannot be served with this memory (message says needed vs available)."""


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory terms in bytes, the resulting KV blocks, and the usable context length.

    ``kv_bytes_per_token`` counts every attention layer; a pool block holds one KV-cache group's
    layers (``kv_groups``, :mod:`latsim.engines.vllm.kvgroups`: all of them unless full and
    sliding-window layers interleave) for ``block_size`` tokens.
    """

    device_bytes: float
    budget_bytes: float
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float
    num_blocks: int
    block_size: int
    max_model_len: int
    kv_groups: KvGroups
    max_num_batched_tokens: int

    @property
    def kv_capacity_tokens(self) -> int:
        """vLLM's "GPU KV cache size" log line: ``num_blocks * block_size`` tokens for one group.

        (vLLM logs ``int(num_blocks / ceil(max_model_len / block_size) * max_model_len)``, the
        same number when ``max_model_len`` is a multiple of ``block_size``.)  With sliding-window
        groups it is that formula with the blocks one full-length request holds at its peak
        (:meth:`KvGroups.max_request_blocks`): the context the pool holds in such requests.  It
        counts the null block; the scheduler can use :attr:`usable_blocks`.
        """
        if not self.kv_groups.sliding:
            return self.num_blocks * self.block_size
        per_request = self.kv_groups.max_request_blocks(self.max_num_batched_tokens, self.max_model_len,
                                                        self.block_size)
        return int(self.num_blocks / per_request * self.max_model_len)

    @property
    def kv_tokens_unwindowed(self) -> int:
        """The context the pool would hold if every layer kept every token: :attr:`kv_capacity_tokens`
        for a model without sliding layers, a lower figure for one with them (the planning
        surrogate's input was trained on it)."""
        return self.num_blocks * self.block_size * self.kv_groups.layers // self.kv_groups.total

    def kv_tokens_at(self, tokens: int) -> int:
        """The context the pool holds in requests of ``tokens`` each (their sliding tables holding
        only the window): :attr:`kv_capacity_tokens` without sliding layers."""
        if not self.kv_groups.sliding:
            return self.num_blocks * self.block_size
        layout = self.kv_layout(self.max_num_batched_tokens)
        held = layout.held(cdiv(tokens, self.block_size), layout.skipped(tokens, self.block_size))
        return int(self.num_blocks / max(held, 1) * tokens)

    def kv_layout(self, max_num_batched_tokens: int) -> KvLayout:
        """The scheduler's block groups at this token budget (:class:`~latsim.sim.kvlayout.KvLayout`)."""
        return self.kv_groups.layout(max_num_batched_tokens, self.max_model_len, self.block_size)

    @property
    def usable_blocks(self) -> int:
        """Blocks vLLM's scheduler can allocate: all but block 0, its null block."""
        return self.num_blocks - 1

    def as_dict(self) -> dict[str, float]:
        d = asdict(self)
        d["kv_capacity_tokens"] = self.kv_capacity_tokens
        return d


@lru_cache(maxsize=1)
def _coefficients() -> dict:
    text = engine_data("vllm", "memory.yaml").read_text()
    return yaml.safe_load(text)


def kv_bytes_per_token_per_gpu(model: ModelSpec, kv_dtype: str, tp: int) -> float:
    """KV bytes one token occupies on one GPU (KV heads are replicated when tp > kv heads)."""
    kv_heads = max(1, model.num_kv_heads // tp)
    return 2.0 * model.num_layers * kv_heads * model.head_dim * DTYPE_BYTES[kv_dtype]


def activation_peak_bytes(model: ModelSpec, tp: int, engine: EngineConfig, coefficients: dict | None = None) -> float:
    """What vLLM's start-up profiling pass adds to the peak besides the weights, per GPU.

    The pass runs a forward over ``max_num_batched_tokens`` tokens, then the sampler over one row
    of logits per request (``min(tokens, max_num_seqs)`` rows) while the forward's output is
    still held; the peak is the larger of the two (``data/memory/README.md``), plus a mixture of
    experts' fused-MoE workspace, held through both.  ``coefficients`` defaults to the fitted
    ``memory.yaml`` (the fit passes candidates)."""
    c = coefficients or _coefficients()
    tokens = float(engine.max_num_batched_tokens or 0)
    rows = min(tokens, float(engine.max_num_seqs or 0))
    element = c["activation_bytes_per_element"]
    forward = tokens * element * (
        c["forward_mlp_multiple"] * _mlp_width(model) / tp
        + c["forward_qkv_multiple"] * (model.q_size + 2 * model.kv_size) / tp
        + c["forward_hidden_multiple"] * model.hidden_size
    )
    if runs_on_v1_runner(model):  # its dummy sampler sorts every logit (top-k and top-p on)
        per_entry = rows * c["v1_sampler_bytes_per_logit"]
    else:
        per_entry = rows * c["sampler_bytes_per_logit"] + model.hidden_size * c["sampler_bytes_per_head_element"]
    sampler = tokens * model.hidden_size * element + model.vocab_size * per_entry / tp
    return max(forward, sampler) + moe_workspace_bytes(model, tp, tokens, c)


V2_RUNNER_MOE_ARCHITECTURES = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})
"""The mixtures of experts vLLM 0.25.1 runs on its V2 model runner, as it runs every dense model."""


def runs_on_v1_runner(model: ModelSpec) -> bool:
    """Whether vLLM 0.25.1 runs ``model`` on its older (V1) model runner: a mixture of experts
    outside :data:`V2_RUNNER_MOE_ARCHITECTURES`.  That runner estimates its CUDA graphs' memory
    before sizing the KV cache and profiles a sampler that sorts every logit."""
    if not model.is_moe:
        return False
    architectures = dict(model.hf_config).get("architectures")
    return not (isinstance(architectures, list) and V2_RUNNER_MOE_ARCHITECTURES.intersection(architectures))


def graph_estimate_bytes(model: ModelSpec, coefficients: dict | None = None) -> float:
    """The CUDA-graph memory vLLM sets aside before the KV cache: its V1 runner's estimate (the
    one model measured's, ``memory.yaml``), else the V2 runner's, which is 0."""
    c = coefficients or _coefficients()
    return c["cuda_graph_bytes"] + (c["v1_cuda_graph_estimate_bytes"] if runs_on_v1_runner(model) else 0.0)


def moe_workspace_bytes(model: ModelSpec, tp: int, tokens: float, c: dict) -> float:
    """The fused-MoE kernels' intermediate caches over ``tokens``: each routed copy of a token
    holds the gate/up output, the activated product and the down output (``(hidden + 3 x moe
    intermediate / tp)`` elements); 0 for a dense model."""
    if not model.is_moe:
        return 0.0
    width = model.hidden_size + c["moe_workspace_intermediate_multiple"] * model.moe_intermediate_size / tp
    return tokens * model.experts_per_token * width * c["activation_bytes_per_element"]


def _mlp_width(model: ModelSpec) -> int:
    """The widest MLP whose activations the forward allocates layer by layer: a dense model's; in a
    mixture of experts the dense layers' and the always-on shared expert's, as the routed experts'
    live in the fused-MoE workspace (:func:`moe_workspace_bytes`; Mixtral-8x7B's probes grow by
    the workspace's slope alone, ``data/memory/README.md``)."""
    if not model.is_moe:
        return model.intermediate_size
    dense = model.intermediate_size if model.num_dense_layers > 0 else 0
    return max(dense, model.shared_expert_intermediate_size)


def plan_memory(deployment: Deployment, engine: EngineConfig | None = None) -> MemoryPlan:
    """Size the KV cache of one replica; raise :class:`DoesNotFitError` when nothing is left,
    with the single changes that were planned again and fit (:mod:`latsim.engines.vllm.advice`).

    ``engine`` is the deployment's resolved engine (default: resolved here)."""
    return _plan(deployment, advise=True, engine=engine)


def _works(deployment: Deployment) -> bool:
    """Whether ``deployment`` plans and passes vLLM's start-up checks (no advice is built)."""
    from latsim.engines.vllm.engine import check_token_budget

    try:
        check_token_budget(deployment, _plan(deployment, advise=False).max_model_len)
    except ValueError:
        return False
    return True


def _plan(deployment: Deployment, advise: bool, engine: EngineConfig | None = None) -> MemoryPlan:
    engine = engine or resolve_engine(deployment)
    model, tp, c = deployment.model, deployment.tp, _coefficients()
    device_bytes = deployment.device.memory_bytes
    budget = budget_bytes(deployment, engine)
    weights = weights_per_gpu(deployment, engine)
    activations = activation_peak_bytes(model, tp, engine, c)
    non_torch = non_torch_bytes(tp, c)
    graphs = graph_estimate_bytes(model, c)
    kv = budget - weights - activations - non_torch - graphs
    per_token = kv_bytes_per_token_per_gpu(model, deployment.kv_dtype, tp)
    bs, groups = engine.block_size, kv_groups(model)
    block_bytes = pool_block_bytes(deployment, engine)
    num_blocks = int(kv // block_bytes) if kv > 0 else 0
    if engine.num_gpu_blocks is not None:
        num_blocks = engine.num_gpu_blocks
    if num_blocks < 1:
        message = _does_not_fit_message(deployment, budget, weights, activations, non_torch + graphs)
        raise DoesNotFitError(message + (fit_advice(deployment, _works) if advise else ""))
    tokens = int(engine.max_num_batched_tokens or 0)
    pages = _request_pages(model, groups, tokens, bs)
    page_bytes = block_bytes / groups.layers
    max_len = _max_model_len(deployment, engine, pages, num_blocks * groups.layers, page_bytes, advise)
    return MemoryPlan(device_bytes, budget, weights, activations, non_torch, graphs, kv, per_token,
                      num_blocks, bs, max_len, groups, tokens)


def budget_bytes(deployment: Deployment, engine: EngineConfig) -> float:
    """What vLLM may use of one GPU: ``gpu_memory_utilization`` of its memory."""
    return engine.gpu_memory_utilization * deployment.device.memory_bytes


def non_torch_bytes(tp: int, coefficients: dict | None = None) -> float:
    """Memory outside PyTorch's allocator per GPU (CUDA context, NCCL's buffers when ``tp > 1``)."""
    c = coefficients or _coefficients()
    return c["non_torch_bytes"] + (c["non_torch_bytes_per_extra_gpu"] if tp > 1 else 0.0)


def weights_per_gpu(deployment: Deployment, engine: EngineConfig) -> float:
    """The weight bytes one GPU loads (a multimodal model's encoders not, under ``--language-model-only``)."""
    model = deployment.model
    loaded = replace(model, encoder_params=0) if engine.language_model_only else model
    return weight_bytes(loaded, deployment.weight_dtype) / deployment.tp


def pool_block_bytes(deployment: Deployment, engine: EngineConfig) -> float:
    """One pool block's bytes per GPU: ``block_size`` tokens of every layer of one KV-cache group."""
    model = deployment.model
    per_token = kv_bytes_per_token_per_gpu(model, deployment.kv_dtype, deployment.tp)
    return per_token / model.num_layers * kv_groups(model).layers * engine.block_size


def _request_pages(model: ModelSpec, groups: KvGroups, tokens: int, block_size: int) -> Callable[[int], int]:
    """Pages (one layer's block) one request of ``n`` tokens may hold at its peak, summed over the
    real layers as vLLM's start-up check (``check_enough_kv_cache_memory``) sums them: every block of
    its context on a full-attention layer, the admission cap on a sliding one (``window - 1`` plus a
    step's tokens, capped at ``n``, plus one block: a block more than a short context's own)."""
    def pages(n: int) -> int:
        slots = cdiv(n, block_size)
        if not groups.sliding:
            return model.num_layers * slots
        capped = groups.layout(tokens, n, block_size).admission_blocks
        return model.num_full_attention_layers * slots + model.num_sliding_window_layers * capped
    return pages


def _max_model_len(deployment: Deployment, engine: EngineConfig, pages: Callable[[int], int], pool_pages: int,
                   page_bytes: float, advise: bool) -> int:
    """The context length the engine runs with: the asked or the model's, if one such request's
    ``pages`` fit the pool's ``pool_pages`` (else :class:`DoesNotFitError`, naming the longest that fits)."""
    model_max = deployment.model.max_position_embeddings
    wanted = engine.max_model_len or model_max
    if engine.max_model_len is not None and engine.max_model_len > model_max:
        raise ValueError(
            f"max_model_len={engine.max_model_len} exceeds the {model_max} positions of {deployment.model.name}"
        )
    if pages(wanted) > pool_pages:
        capacity = _longest_fitting(pages, pool_pages, wanted)
        shorter = replace(deployment, engine=replace(deployment.engine, max_model_len=capacity))
        advice = fit_advice(deployment, _works) if advise else ""
        raise DoesNotFitError(
            f"{deployment.model.name} with max_model_len={wanted} needs {pages(wanted) * page_bytes / GIB:.2f} GiB of "
            f"KV cache per GPU for one full-length request, but only {pool_pages * page_bytes / GIB:.2f} GiB is left "
            f"({capacity} tokens)"
            + (f"; it fits with --max-model-len {capacity}" + advice.replace("; it fits with", ", or with", 1)
               if advise and _works(shorter) else advice)
        )
    return wanted


def _longest_fitting(pages: Callable[[int], int], pool_pages: int, upper: int) -> int:
    """The longest request below ``upper`` whose ``pages`` fit ``pool_pages`` (0 when none does)."""
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pages(mid) <= pool_pages:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _does_not_fit_message(deployment: Deployment, budget: float, weights: float, activations: float,
                          other: float) -> str:
    dev, model = deployment.device, deployment.model
    engine = resolve_engine(deployment)
    return (
        f"{model.name} ({deployment.weight_dtype}) does not fit on {dev.name} at tp={deployment.tp}: it needs "
        f"{(weights + activations + other) / GIB:.1f} GiB per GPU before any KV cache (weights "
        f"{weights / GIB:.1f}, profiling activations {activations / GIB:.1f} for max_num_batched_tokens "
        f"{engine.max_num_batched_tokens} and max_num_seqs {engine.max_num_seqs}, other {other / GIB:.1f}), "
        f"but gpu_memory_utilization {engine.gpu_memory_utilization} x {dev.memory_gib:.1f} GiB leaves "
        f"{budget / GIB:.1f} GiB"
    )
