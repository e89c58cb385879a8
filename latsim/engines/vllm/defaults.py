"""vLLM 0.25.1's own defaults that shape a deployment (read from its source: ``vllm/engine/arg_utils.py``,
``vllm/config/compilation.py``).

- OpenAI-server token budget and seat count: GPUs with at least 70 GiB that are not A100 get
  the large defaults, every other GPU the small ones.
- CUDA graphs are captured up to ``min(2 x max_num_seqs, 512, max_num_batched_tokens)``
  tokens; larger steps run eagerly.
"""

from __future__ import annotations

from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.host import MAX_CUDAGRAPH_TOKENS

__all__ = ["MAX_CUDAGRAPH_TOKENS", "cudagraph_limit", "server_defaults"]

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
    """The most tokens a step may have and still replay a captured CUDA graph (vLLM 0.25.1's
    default capture sizes end at ``min(2 x max_num_seqs, 512, max_num_batched_tokens)``)."""
    return min(2 * max_num_seqs, MAX_CUDAGRAPH_TOKENS, max_num_batched_tokens)
