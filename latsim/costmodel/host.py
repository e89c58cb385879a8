"""The engine's host (CPU) side of a step, and how it overlaps the GPU.

A serving engine spends CPU time every step: scheduling, preparing inputs, and turning
sampled tokens into outputs for each request.  With vLLM's synchronous loop that time adds to
the GPU time; with asynchronous scheduling (vLLM 0.25.1's default) step N+1 is prepared while
step N runs, so a step lasts about ``max(gpu, host)``.  ``frontend_s`` is the latency a request
sees outside the step loop (handing the request to the engine process and streaming tokens
back): it shifts every token time of a request, leaving TPOT and ITL unchanged.  The output
path also costs ``output_seq_s`` per request whose output the front end handles before a new
request's first token, which comes last among its step's outputs (the requests running then:
:func:`latsim.sim.simulate.outputs_ahead`); measured in live runs as the first token's delay
past the engine's own stamp (``scripts/output_lag.py``).  Its input path costs ``input_s`` per
arriving request, which holds back requests that arrive together (:mod:`latsim.sim.frontend`).

A step with more tokens than the largest captured CUDA graph (vLLM: ``min(2 x max_num_seqs,
512, max_num_batched_tokens)`` tokens, :func:`latsim.engines.vllm.defaults.cudagraph_limit`) runs without graphs: every
kernel is launched from Python.  That costs ``eager_layer_s`` per layer, and
``eager_moe_layer_s`` more per mixture-of-experts layer (routing, alignment and the fused
expert kernels are several Python-level calls), on top of the GPU time (measured live runs
show it adds rather than overlaps: a 512-token prompt joining a decode batch of Llama-3.1-8B
costs about twice its GEMM time).  It is not kernel time (profiled graph-less steps add up to
their kernels without it): the GPU waits for the Python launches inside the step, so it is
CPU time and scales with the host's speed like the other CPU terms.  Under asynchronous
scheduling the launch of such a step also holds back the outputs of the step before it: the
step's host time, then ``launch_layer_s`` per layer (and ``launch_moe_layer_s`` more per MoE
layer, ``launch_shared_layer_s`` more again per MoE layer with a shared expert, which vLLM runs
eagerly inside the MoE op) of CPU time, the next step decided only once it ends, the step ending
``launch_tail_s`` after it at the earliest (:mod:`latsim.engines.vllm.launch` applies it; the
cost model only prices it).

:class:`HostOverlapCostModel` wraps a GPU-only cost model (one built with zero step overhead)
and applies these terms.  An engine's fitted parameters ship with the engine (vLLM's:
``latsim/data/engines/vllm/host.yaml``, read by :mod:`latsim.engines.vllm.host_terms`).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from latsim.costmodel.batch import BatchShape, StepPricer
from latsim.costmodel.coreads import BoundCoReads


@dataclass(frozen=True)
class HostOverhead:
    """Host seconds per step (``step_s + seq_s x sequences``), front-end latency, GPU-time scale,
    the extra seconds per layer of a step run without CUDA graphs, and that step's launch
    (seconds per layer, and the GPU's tail after the launch; zero: not modelled), and the
    front end's time per output ahead of a first token, and its input work per arriving request
    and the longest it holds hand-overs (:mod:`latsim.sim.frontend`: what holds requests that
    arrive together back from the engine; a window of 0: none)."""

    step_s: float
    seq_s: float
    frontend_s: float
    gpu_scale: float = 1.0
    source: str = "argument"
    eager_layer_s: float = 0.0
    eager_moe_layer_s: float = 0.0
    launch_layer_s: float = 0.0
    launch_moe_layer_s: float = 0.0
    launch_shared_layer_s: float = 0.0
    launch_tail_s: float = 0.0
    launch_sigma: float = 0.0
    output_seq_s: float = 0.0
    input_s: float = 0.0
    input_window_s: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.gpu_scale, (int, float)) and 0.0 < self.gpu_scale < 10.0):
            raise ValueError(f"gpu_scale must be in (0, 10), got {self.gpu_scale!r}")
        for name in TERMS:
            value = getattr(self, name)
            if name != "gpu_scale" and not (isinstance(value, (int, float)) and value >= 0.0 and np.isfinite(value)):
                raise ValueError(f"host overhead {name} must be a finite number >= 0, got {value!r}")

    def at_speed(self, speed: float) -> HostOverhead:
        """These terms on a host whose CPU runs ``speed`` times as fast as the one they were
        measured on: the CPU seconds (:data:`SPEED_FIELDS`) divided by ``speed``; the GPU-side
        terms (``gpu_scale``, the launch's tail) and the launch spread unchanged."""
        check_host_speed(speed)
        if speed == 1.0:
            return self
        scaled = {name: getattr(self, name) / speed for name in SPEED_FIELDS}
        return replace(self, source=f"{self.source} at host speed {speed:g}", **scaled)


SPEED_FIELDS = ("step_s", "seq_s", "frontend_s", "launch_layer_s", "launch_moe_layer_s", "launch_shared_layer_s",
                "output_seq_s", "eager_layer_s", "eager_moe_layer_s", "input_s")
"""The terms that are the engine's CPU time, and so scale with the host's CPU speed (the eager
terms since the twentieth session: the launch-bound wait inside a graph-less step)."""
HOST_SPEED_RANGE = (0.1, 10.0)


def check_host_speed(speed: object) -> None:
    """ValueError unless ``speed`` is a number in :data:`HOST_SPEED_RANGE`."""
    lo, hi = HOST_SPEED_RANGE
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not lo <= speed <= hi:
        raise ValueError(f"host_speed must be a number in [{lo:g}, {hi:g}] (1: the host latsim's CPU terms "
                         f"were measured on, 0.5: a CPU half as fast), got {speed!r}")


TERMS = tuple(f.name for f in fields(HostOverhead) if f.name != "source")
"""Every numeric term of :class:`HostOverhead`, in declaration order."""

MAX_CUDAGRAPH_TOKENS = 512
"""The largest CUDA graph a serving engine captures by default (tokens per step; vLLM 0.25.1's
capture sizes end here).  The calibrated tables price all-reduce of steps up to it as in-graph."""


@lru_cache(maxsize=64)
def graph_sizes_up_to(top: int) -> tuple[int, ...]:
    """vLLM 0.25.1's default CUDA-graph capture sizes up to ``top`` tokens, ascending: 1, 2, 4, the
    multiples of 8 below 256 and every 16 from 256 (the engine adds its token budget when that is
    at most ``top``: :func:`~latsim.engines.vllm.defaults.cudagraph_capture_sizes`)."""
    sizes = [size for size in (1, 2, 4) if size <= top]
    sizes.extend(range(8, min(top + 1, 256), 8))
    sizes.extend(range(256, top + 1, 16))
    return tuple(sizes)


def padded_graph_size(tokens: int, limit: int) -> int:
    """The CUDA graph a step of ``tokens`` tokens (at most ``limit``, the engine's largest captured
    size) replays in vLLM 0.25.1: the first of :func:`graph_sizes_up_to` ``limit`` at or above it,
    else the limit itself."""
    sizes = graph_sizes_up_to(limit)
    i = bisect_left(sizes, tokens)
    return sizes[i] if i < len(sizes) else limit


class HostOverlapCostModel:
    """``inner`` (GPU time) combined with host time: ``max`` when asynchronous, sum when not.

    ``layers``, ``moe_layers``, ``shared_layers`` (MoE layers with a shared expert) and
    ``graph_tokens`` (the engine's CUDA-graph limit; ``None``: every step replays a graph) price
    steps run without CUDA graphs.  A step within the limit replays
    the graph of :func:`padded_graph_size`; where the inner model prices padding (``moe_pad_s``:
    a mixture of experts routes the padded tokens too) it is added to the step's GPU time.
    ``decode_run`` applies the same float operations as ``step_time`` element for element.
    """

    def __init__(self, inner: StepPricer, host: HostOverhead, asynchronous: bool = True, *,
                 layers: int = 0, moe_layers: int = 0, shared_layers: int = 0, graph_tokens: int | None = None,
                 coreads: BoundCoReads | None = None) -> None:
        self.inner = inner
        self.host = host
        self.asynchronous = asynchronous
        self.kind = inner.kind
        self.label = getattr(inner, "label", inner.kind)
        self.frontend_s = host.frontend_s
        self.output_seq_s = host.output_seq_s
        self.input_s = host.input_s
        self.input_window_s = host.input_window_s
        self._inner_step = inner.step_time  # step_time is hot: bind once
        self.power = getattr(inner, "power", None)
        """The GPU's power-cap terms, when the inner model has them (:mod:`latsim.costmodel.power`)."""
        self.tflop_per_token: float = getattr(inner, "tflop_per_token", 0.0)
        """The inner model's tensor work per token (:mod:`latsim.costmodel.power`)."""
        self._scale, self._step_s, self._seq_s = host.gpu_scale, host.step_s, host.seq_s
        self._eager_dense_s = host.eager_layer_s * layers
        self._eager_moe_s = host.eager_moe_layer_s * moe_layers
        self._eager_s = self._eager_dense_s + self._eager_moe_s
        launch = (host.launch_layer_s * layers + host.launch_moe_layer_s * moe_layers
                  + host.launch_shared_layer_s * shared_layers) if asynchronous else 0.0
        graphs = graph_tokens is not None and (self._eager_s > 0.0 or launch > 0.0)
        self._graph_tokens = graph_tokens if graphs else None
        self._launch = launch if graphs else 0.0
        self.launch_tail_s = host.launch_tail_s
        self.launch_sigma = host.launch_sigma
        self.launch_from: int | None = graph_tokens if self._launch > 0.0 else None
        """Steps of more tokens than this have a launch (:meth:`launch_s`); ``None``: none has."""
        self.coreads = coreads
        """The GPU's co-read terms for this deployment (:mod:`latsim.costmodel.coreads`), or None."""
        pad = getattr(inner, "moe_pad_s", None) if moe_layers and graph_tokens is not None else None
        self._pad = pad
        self._pad_limit = graph_tokens or 0

    def padding_s(self, tokens: int) -> float:
        """GPU seconds (before ``gpu_scale``) a step of ``tokens`` tokens adds by replaying the
        CUDA graph of :func:`padded_graph_size` (0.0 above the graph limit or without padding)."""
        if self._pad is None or tokens > self._pad_limit:
            return 0.0
        return float(self._pad(tokens, padded_graph_size(tokens, self._pad_limit)))

    def launch_s(self, batch: BatchShape) -> float:
        """CPU seconds to launch ``batch`` when it runs without CUDA graphs under asynchronous
        scheduling (0.0 for a graph step, or when no launch term is set): the step's host work
        (``step_s + seq_s x sequences``: scheduling and preparing its inputs come first), then
        the kernels, layer by layer."""
        if self.launch_from is None or batch.num_tokens <= self.launch_from:
            return 0.0
        return self._host_s(batch.num_seqs) + self._launch

    def _host_s(self, seqs: int) -> float:
        return self._step_s + self._seq_s * seqs

    def kernel_s(self, batch: BatchShape) -> float:
        """The GPU kernels' seconds of ``batch``: the inner model's price with the padded graph's
        experts (:meth:`padding_s`), times ``gpu_scale``; no eager or host term (0.0 when empty)."""
        inner = self._inner_step(batch)
        if self._pad is not None and inner > 0.0:
            inner = inner + self.padding_s(batch.num_tokens)
        return inner * self._scale

    def step_time(self, batch: BatchShape) -> float:
        gpu = self.kernel_s(batch)
        if gpu <= 0.0:
            return 0.0
        if self._graph_tokens is not None and batch.num_tokens > self._graph_tokens:
            gpu += self.eager_wait_s(gpu)
        host = self._host_s(batch.num_seqs)
        if self.asynchronous:
            return gpu if gpu > host else host
        return gpu + host

    def heavy_parts(self, batch: BatchShape, light: bool = False) -> tuple[float, float, float]:
        """The inner model's heavy seconds (:mod:`latsim.costmodel.power`) at this GPU-time scale,
        with their full-clock and capped ratios (``light``: a light step's)."""
        heavy, full, capped = self.inner.heavy_parts(batch, light)  # type: ignore[attr-defined]
        return heavy * self._scale, full, capped

    def decode_tflops(self, batch: BatchShape) -> float:
        """The inner model's decode tensor rate (:mod:`latsim.costmodel.power`) at this GPU-time scale."""
        return float(self.inner.decode_tflops(batch)) / self._scale  # type: ignore[attr-defined]

    def eager_s(self, batch: BatchShape) -> float:
        """The CPU-paced seconds inside ``batch``'s GPU time (:meth:`parts`): the eager terms of a
        step run without CUDA graphs, 0.0 for a graph step or an empty one."""
        if self._graph_tokens is None or batch.num_tokens <= self._graph_tokens:
            return 0.0
        return self.eager_wait_s(self.kernel_s(batch))

    def eager_wait_s(self, kernel_s: float) -> float:
        """The eager terms of a graph-less step whose kernels take ``kernel_s``: the dense layers'
        in full (``eager_layer_s``: it stands in for the GPU's clock under load as much as for a
        wait, ``docs/step-time-model.md``), the MoE layers' only while the CPU's launch is ahead of
        the kernels (``eager_moe_layer_s``, the GPU waiting for the Python-level routing, alignment
        and expert calls, never past the launch's end; in full without a launch term): a long
        prompt's expert kernels outlast the launch and wait for nothing."""
        if self._launch <= 0.0 or self._eager_moe_s <= 0.0:
            return self._eager_s
        return self._eager_dense_s + min(self._eager_moe_s, max(0.0, self._launch - kernel_s))

    def parts(self, batch: BatchShape) -> tuple[float, float]:
        """``(GPU seconds, host seconds)`` of one step: :meth:`step_time` is their ``max`` when
        asynchronous, their sum when not (``(0.0, 0.0)`` for an empty step)."""
        gpu = self.kernel_s(batch)
        if gpu <= 0.0:
            return 0.0, 0.0
        return gpu + self.eager_s(batch), self._host_s(batch.num_seqs)

    def decode_run(self, seqs: int, kv_tokens: int, steps: int, kv_sq: int = 0) -> npt.NDArray[np.float64]:
        inner = self.inner.decode_run(seqs, kv_tokens, steps, kv_sq)
        if self._pad is not None and seqs > 0:
            inner = inner + self.padding_s(seqs)
        gpu = inner * self._scale
        if seqs == 0:
            return gpu
        if self._graph_tokens is not None and seqs > self._graph_tokens:
            if self._launch > 0.0 and self._eager_moe_s > 0.0:  # eager_wait_s, element by element
                gpu = gpu + (self._eager_dense_s + np.minimum(self._eager_moe_s, np.maximum(0.0, self._launch - gpu)))
            else:
                gpu = gpu + self._eager_s
        host = self._host_s(seqs)
        out: npt.NDArray[np.float64] = np.maximum(gpu, host) if self.asynchronous else gpu + host
        return out

    def describe(self) -> dict[str, object]:
        coreads = None if self.coreads is None else {"saving": self.coreads.saving,
                                                     "prompt_saving": self.coreads.prompt_saving,
                                                     "wave": self.coreads.wave, "source": self.coreads.terms.source}
        return {**self.inner.describe(), "host": {**asdict(self.host), "asynchronous": self.asynchronous,
                                                  "eager_above_tokens": self._graph_tokens,
                                                  "launch_s": self._launch},
                "coreads": coreads,
                "graph_padding": ({"priced": "routed experts at the captured size", "graph_limit": self._pad_limit}
                                  if self._pad is not None else None)}
