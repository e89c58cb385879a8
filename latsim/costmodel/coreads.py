"""Decode steps whose sequences share prefix blocks read part of that KV from L2, not HBM.

vLLM's decode attention (FA3 on Hopper) runs one work unit per sequence and KV head, about one
unit per SM at a time, so the sequences whose attention runs together form a *wave* of
``ctas_per_sm x SMs / KV heads per GPU`` sequences.  A block of a shared prefix read by several
sequences of one wave comes from HBM once and, for the others, mostly from L2 (a *co-read*); a
sequence of a later wave reads it from HBM again: the wave's stream of private KV has pushed it
out.  The decode price (:mod:`latsim.costmodel.calibrated`, :mod:`latsim.costmodel.roofline`)
reads every sequence's KV from HBM; the engine removes ``saving x`` the co-read tokens from the
step's KV before pricing it (:func:`latsim.sim.shape.with_coreads`).

Measured on the H100 (``data/traces/h100/s45``: ``shared`` scenarios of ``scripts/device_trace.py``
against ``decode`` ones of the same contexts; Llama-3.1-8B and Qwen2.5-7B, 16-256 sequences, 1-64
prefixes of 512-4,096 tokens); ``scripts/fit_coreads.py`` writes ``saving``, ``ctas_per_sm`` and
the measuring GPU's HBM bandwidth to :data:`COREADS_FILE` with the scenarios it used.  In those
runs sequence ``j`` read prefix ``j mod G`` (:func:`ordered_saved`); in a served batch the
prefixes fall in no particular order, so the engine prices the expectation over random orders
(:func:`expected_saved`).  On another Hopper GPU the L2 read is taken to cost the same and the
HBM read what the catalog's bandwidth says (:meth:`CoReads.saving_at`): the H200's faster HBM
leaves less to save.  The wave needs the GPU's SM count: GPUs without one in the catalog get no
discount, and only Hopper (``sm90``, where it was measured) gets one.  Multi-head attention (one
query head per KV head) gets none either: Phi-3-mini's decode over one shared prefix ran 6-7 %
faster (the model would say up to 29 %) and over four or eight 0-3 %
(``data/traces/h100/s45/shared-phi-3-mini``); why its waves do not co-read is open.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latsim.catalog.devices import DeviceSpec
from latsim.paths import CALIBRATION

COREADS_FILE = "coreads.json"


def ordered_saved(order: Sequence[int], tokens: dict[int, int], wave: float) -> float:
    """Co-read tokens of a batch in a known order: ``order[j]`` is sequence j's prefix (-1: none)
    and ``tokens[g]`` prefix g's shared tokens; sequence j runs in wave ``floor(j / wave)``.
    In each wave every prefix read by ``m >= 1`` of its sequences is co-read ``m - 1`` times."""
    if wave <= 0.0:
        raise ValueError(f"wave must be > 0, got {wave}")
    counts: dict[tuple[int, int], int] = {}
    for j, g in enumerate(order):
        if g >= 0:
            key = (int(j // wave), g)
            counts[key] = counts.get(key, 0) + 1
    return float(sum((m - 1) * tokens[g] for (_, g), m in counts.items()))


def _absent(seqs: int, n: int, w: float) -> float:
    """Probability that none of ``n`` marked sequences of ``seqs`` is among ``w`` drawn without
    replacement (``w`` may be fractional: the hypergeometric ratio through ``lgamma``)."""
    if seqs - n - w + 1.0 <= 0.0:
        return 0.0
    log_q = (math.lgamma(seqs - n + 1.0) - math.lgamma(seqs - n - w + 1.0)
             - math.lgamma(seqs + 1.0) + math.lgamma(seqs - w + 1.0))
    return math.exp(log_q)


def expected_saved(seqs: int, groups: Sequence[tuple[int, float]], wave: float) -> float:
    """Expected co-read tokens of ``seqs`` decoders in random order, ``groups`` holding
    ``(readers, shared tokens)`` of each prefix read by two or more of them.

    The batch runs in ``seqs / w`` waves of ``w = min(seqs, wave)`` sequences; a prefix of ``n``
    readers is in a wave with probability ``1 - absent`` and co-read ``n - waves x (1 - absent)``
    times in all (``n - 1`` when the whole batch is one wave)."""
    if wave <= 0.0:
        raise ValueError(f"wave must be > 0, got {wave}")
    if seqs <= 1 or not groups:
        return 0.0
    w = float(seqs) if seqs < wave else wave
    waves = seqs / w
    total = 0.0
    for n, tokens in groups:
        co = n - waves * (1.0 - _absent(seqs, n, w))
        if co > 0.0:
            total += co * tokens
    return total


@dataclass(frozen=True)
class CoReads:
    """The fitted co-read terms: ``saving`` is the share of an HBM read a co-read saves on the GPU
    they were measured on, whose HBM moves ``hbm_bandwidth`` bytes/s; ``ctas_per_sm`` the decode
    work units an SM runs at once; ``source`` the file they came from."""

    saving: float
    ctas_per_sm: float
    hbm_bandwidth: float
    source: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.saving <= 1.0:
            raise ValueError(f"co-read saving must be within [0, 1], got {self.saving}")
        if self.ctas_per_sm <= 0.0:
            raise ValueError(f"ctas_per_sm must be > 0, got {self.ctas_per_sm}")
        if self.hbm_bandwidth <= 0.0:
            raise ValueError(f"hbm_bandwidth must be > 0, got {self.hbm_bandwidth}")

    def saving_at(self, hbm_bandwidth: float) -> float:
        """The saving on a Hopper GPU whose HBM moves ``hbm_bandwidth`` bytes/s: a co-read takes
        ``1 - saving`` of an HBM read where measured, and the L2 read's time is taken to be the
        same on every Hopper die, so a faster HBM leaves less to save (the H200: 0.59 -> 0.41)."""
        return min(1.0, max(0.0, 1.0 - (1.0 - self.saving) * hbm_bandwidth / self.hbm_bandwidth))

    def bind(self, sm_count: int, kv_heads: int, hbm_bandwidth: float) -> BoundCoReads:
        """These terms on a GPU of ``sm_count`` SMs and ``hbm_bandwidth`` bytes/s serving
        ``kv_heads`` KV heads per GPU."""
        return BoundCoReads(self, self.ctas_per_sm * sm_count / max(1, kv_heads), self.saving_at(hbm_bandwidth))


@dataclass(frozen=True)
class BoundCoReads:
    """:class:`CoReads` for one deployment: ``wave`` sequences run their decode attention at once,
    a co-read saves ``saving`` of an HBM read."""

    terms: CoReads
    wave: float
    saving: float

    def discount(self, seqs: int, groups: Sequence[tuple[int, float]]) -> float:
        """KV tokens a decode step of ``seqs`` sequences does not read from HBM, ``groups`` as in
        :func:`expected_saved` (sorted, so equal batches give bitwise-equal discounts)."""
        return self.saving * expected_saved(seqs, groups, self.wave)


def load_coreads(path: Path | None = None) -> CoReads | None:
    """The shipped co-read terms (``path``: another file of the same form); None when absent;
    ValueError naming the file when it is malformed."""
    path = path or CALIBRATION / COREADS_FILE
    if not path.is_file():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return CoReads(float(data["saving"]), float(data["ctas_per_sm"]), float(data["hbm_bandwidth_gb_s"]) * 1e9,
                       str(path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a co-read file ({exc}); rebuild it with scripts/fit_coreads.py") from exc


def coreads_for(device: DeviceSpec, kv_heads: int, queries_per_kv: int,
                path: Path | None = None) -> BoundCoReads | None:
    """The co-read terms bound to ``device`` serving ``kv_heads`` KV heads per GPU, each read by
    ``queries_per_kv`` query heads (None off Hopper, without an SM count, for multi-head
    attention, or without the file)."""
    if device.arch != "sm90" or not device.sm_count or queries_per_kv < 2:
        return None
    terms = load_coreads(path)
    return None if terms is None else terms.bind(device.sm_count, kv_heads, device.hbm_bandwidth)
