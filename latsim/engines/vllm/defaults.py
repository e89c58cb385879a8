"""vLLM 0.25.1's own defaults that shape a deployment (read from its source: ``vllm/engine/arg_utils.py``,
``vllm/config/compilation.py``).

- OpenAI-server token budget and seat count: GPUs with at least 70 GiB that are not A100 get
  the large defaults, every other GPU the small ones.
- CUDA graphs are captured at 1, 2, 4 tokens, every 8 to 256 and every 16 from 256, up to
  ``min(2 x max_num_seqs, 512, max_num_batched_tokens)`` tokens; larger steps run eagerly.  A
  smaller step replays the graph of the next captured size, its inputs padded to it (the cost
  model prices a step at its own size, but a mixture of experts also routes the padded tokens:
  :func:`latsim.costmodel.host.padded_graph_size`, ``docs/step-time-model.md``, "CUDA-graph
  padding").
"""

from __future__ import annotations

from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.host import MAX_CUDAGRAPH_TOKENS, graph_sizes_up_to

__all__ = ["MAX_CUDAGRAPH_TOKENS", "cudagraph_capture_sizes", "cudagraph_limit", "server_defaults"]

LARGE_GPU_MIN_GIB = 70.0
SERVER_DEFAULTS_LARGE = (8192, 1024)  # (max_num_batched_tokens, max_num_seqs)
SERVER_DEFAULTS_SMALL = (2048, 256)


def server_defaults(device: DeviceSpec) -> tuple[int, int]:
    """vLLM's OpenAI-server ``(max_num_batched_tokens, max_num_seqs)`` for ``device``."""
    is_a100 = device.name.startswith("a100")
    if device.memory_gib >= LARGE_GPU_MIN_GIB and not is_a100:
        return SERVER_DEFAULTS_LARGE
    return SERVER_DEFAULTS_SMALL


def cudagraph_limit(max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """The most tokens a step may have and still replay a captured CUDA graph: the largest of
    :func:`cudagraph_capture_sizes` (``min(2 x max_num_seqs, 512, max_num_batched_tokens)`` when
    that is a captured size, as with the server defaults)."""
    return cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens)[-1]


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """The step sizes (tokens, ascending) vLLM 0.25.1 captures CUDA graphs at by default
    (``VllmConfig._set_cudagraph_sizes``): up to ``top = min(2 x max_num_seqs, 512,
    max_num_batched_tokens)``, the sizes 1, 2, 4, the multiples of 8 below 256, every 16 from
    256, and ``max_num_batched_tokens`` itself when it is at most ``top``.  A graph step of ``n``
    tokens runs at the first of them at least ``n``."""
    top = min(2 * max_num_seqs, MAX_CUDAGRAPH_TOKENS, max_num_batched_tokens)
    sizes = set(graph_sizes_up_to(top))
    if max_num_batched_tokens <= top:
        sizes.add(max_num_batched_tokens)
    return tuple(sorted(sizes))
