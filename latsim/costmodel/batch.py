"""The shape of one engine step, as the cost model sees it.

The scheduler decides *which* tokens run; the cost model only needs aggregates of that
decision.  Keeping this a small immutable record lets cost models (roofline, calibrated,
transferred) be swapped without touching the engine, and lets the engine price runs of
decode-only steps in one vectorised call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from latsim.costmodel.coreads import BoundCoReads


@dataclass(frozen=True)
class BatchShape:
    """Aggregates of one step's work (per replica, before tensor-parallel sharding).

    - ``prefill_tokens``: new prompt (or recomputed) tokens over all prefill chunks.
    - ``prefill_seqs``: how many requests contribute a prefill chunk.
    - ``prefill_attn_pairs``: sum over chunks of query x key pairs with the causal mask,
      ``q * ctx + q * (q + 1) / 2`` for a chunk of ``q`` tokens after ``ctx`` cached ones.
    - ``prefill_kv_tokens``: sum over chunks of ``ctx + q`` (KV entries the chunk reads).
    - ``decode_seqs``: requests decoding one token each.
    - ``decode_kv_tokens``: sum of the decodes' context lengths (KV entries read).
    - ``max_prefill_chunk``: the longest chunk in the step (kernel tile effects).
    - ``decode_kv_sq``: sum of the decodes' squared context lengths (their spread:
      :mod:`latsim.costmodel.spread`); 0 when unknown, priced as equal contexts.
    """

    prefill_tokens: int = 0
    prefill_seqs: int = 0
    prefill_attn_pairs: float = 0.0
    prefill_kv_tokens: int = 0
    decode_seqs: int = 0
    decode_kv_tokens: int = 0
    max_prefill_chunk: int = 0
    decode_kv_sq: int = 0

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs

    @property
    def num_seqs(self) -> int:
        return self.prefill_seqs + self.decode_seqs

    @staticmethod
    def from_chunks(chunks: list[tuple[int, int]], decode_contexts: list[int]) -> BatchShape:
        """Build from ``(chunk_tokens, cached_context)`` pairs and decode context lengths.

        Plain integer arithmetic (numpy's per-call overhead was most of a cost-model call): every
        term of the pair count is a whole or half number, so the float sum is exact and equals the
        former float64 array sum whatever the order, below 2**52 pairs."""
        tokens = kv = doubled_pairs = longest = 0
        for q, ctx in chunks:
            q, ctx = int(q), int(ctx)
            tokens += q
            kv += q + ctx
            doubled_pairs += 2 * q * ctx + q * (q + 1)
            longest = max(longest, q)
        return BatchShape(
            prefill_tokens=tokens,
            prefill_seqs=len(chunks),
            prefill_attn_pairs=doubled_pairs / 2,
            prefill_kv_tokens=kv,
            decode_seqs=len(decode_contexts),
            decode_kv_tokens=int(sum(decode_contexts)),
            max_prefill_chunk=longest,
            decode_kv_sq=sum(int(c) * int(c) for c in decode_contexts),
        )


class StepPricer(Protocol):
    """Prices engine steps in seconds of GPU work (no engine CPU time).

    ``kind`` names what serves the prediction (``roofline``, ``calibrated``, ``transferred``)
    and is reported with every result.  ``decode_run`` prices ``steps`` consecutive decode-only
    steps of ``seqs`` requests whose summed context starts at ``kv_tokens`` and grows by
    ``seqs`` per step, their squared contexts summing to ``kv_sq`` at the first step (0:
    unknown); it must equal calling ``step_time`` on each step, element for element.
    """

    kind: str

    def step_time(self, batch: BatchShape) -> float: ...

    def decode_run(self, seqs: int, kv_tokens: int, steps: int, kv_sq: int = 0) -> np.ndarray: ...

    def describe(self) -> dict[str, object]: ...


class CostModel(StepPricer, Protocol):
    """What the simulator prices a step with: a :class:`StepPricer` whose step times include
    the engine's CPU work, plus the engine's terms outside the step.

    - ``frontend_s``: latency added to every token a request receives (handing the request to
      the engine and streaming tokens back); it does not change what the engine does.
    - ``output_seq_s``: latency added to a request's first token per other request running
      when it came out (the front end hands their outputs on before the new request's).
    - ``input_s``: the front end's work per arriving request, which holds back from the engine
      requests that arrive together, for at most ``input_window_s`` (0: no limit) at a time
      (:mod:`latsim.sim.frontend`).
    - ``launch_from``: steps of more tokens than this are launched kernel by kernel
      (``None``: no step is); ``launch_s(batch)`` is that launch's CPU seconds,
      ``launch_tail_s`` the least time the GPU runs after it, ``launch_sigma`` the log-normal
      spread of launch times.
    - ``coreads``: how much of the decoders' shared-prefix KV the GPU's L2 serves
      (:mod:`latsim.costmodel.coreads`; ``None``: every sequence's KV is read from HBM); the
      engine takes it off a step's KV before pricing it (:func:`latsim.sim.shape.with_coreads`).
    """

    frontend_s: float
    output_seq_s: float
    input_s: float
    input_window_s: float
    launch_from: int | None
    launch_tail_s: float
    launch_sigma: float
    coreads: BoundCoReads | None

    def launch_s(self, batch: BatchShape) -> float: ...


def squares_after(seqs: int, kv_tokens: int, kv_sq: int, steps: int) -> int:
    """The decodes' summed squared contexts ``steps`` steps after a step whose contexts sum to
    ``kv_tokens`` and their squares to ``kv_sq`` (each context grows by one a step; 0 stays
    unknown)."""
    if kv_sq <= 0:
        return 0
    return kv_sq + 2 * steps * kv_tokens + seqs * steps * steps


def run_squares(seqs: int, kv_tokens: int, kv_sq: int, steps: int) -> np.ndarray:
    """:func:`squares_after` for each step of a decode run, as float64 (exact below 2**53)."""
    if kv_sq <= 0:
        return np.zeros(steps, dtype=np.float64)
    i = np.arange(steps, dtype=np.float64)
    out: np.ndarray = float(kv_sq) + 2.0 * i * float(kv_tokens) + float(seqs) * i * i
    return out


class NoHostTerms:
    """The engine terms of a :class:`CostModel` that has none (a GPU-only or test model):
    subclass it beside ``step_time``/``decode_run``/``describe``."""

    frontend_s = 0.0
    output_seq_s = 0.0
    input_s = 0.0
    input_window_s = 0.0
    launch_from: int | None = None
    launch_tail_s = 0.0
    launch_sigma = 0.0
    coreads: BoundCoReads | None = None

    def launch_s(self, batch: BatchShape) -> float:
        del batch
        return 0.0
