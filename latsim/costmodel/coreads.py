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
prefixes of 512-4,096 tokens; ``s46``: Llama-2-7B); ``scripts/fit_coreads.py`` writes ``saving``,
``ctas_per_sm`` and the measuring GPU's HBM bandwidth to :data:`COREADS_FILE` with the scenarios
it used.  In those runs sequence ``j`` read prefix ``j mod G`` (:func:`ordered_saved`); in a served batch the
prefixes fall in no particular order, so the engine prices the expectation over random orders
(:func:`expected_saved`).  On another Hopper GPU the L2 read is taken to cost the same and the
HBM read what the catalog's bandwidth says (:meth:`CoReads.saving_at`): the H200's faster HBM
leaves less to save, 0.445 scaled; its own traces (``data/traces/h200/s47``) measured 0.34, which
the file carries (``gpu_savings``) and the H200 uses.  The wave needs the GPU's SM count: GPUs
without one in the catalog get no discount, and only Hopper (``sm90``, where it was measured) gets one.

A co-read takes the KV read off the step, not the tile's work.  FA3 runs a decode call's tile
of ``M`` query rows whatever the rows it holds (:func:`decode_tile_rows`: 64 rows for head dims
of 64 and 128 without a window, where a query group fits; 192 for head dims up to 96, 128
above), ``4 x M x head_dim`` FLOP for every KV token and head read, so a co-read saves at most
``1 - M / ridge_rows`` of that token's time: ``ridge_rows`` is the tile height whose work takes
as long as the unshared read.  On the H100 (``data/traces/h100/s45``, ``s46``): Llama-3.1-8B,
Qwen2.5-7B and Llama-2-7B (multi-head, head dim 128: 64 rows) saved about 60 % of their
co-read tokens' time, Mistral-7B (windowed: 128 rows) 39-46 %, Phi-3-mini (head dim 96: 192
rows) 13-17 %, the 8B over an FP8 cache (64 rows, but an FP8 tile does more a byte read)
16-20 %.  ``scripts/fit_coreads.py`` fits ``saving`` and ``ctas_per_sm`` on the 64-row bf16
pairs, then ``ridge_rows`` on the taller tiles' and ``ridge_rows_fp8`` on the FP8 cache's.  On
another GPU the ridge scales with the GPU's bf16 FLOP/s over its HBM bandwidth
(:meth:`CoReads.cap_at`); a model whose layers run different tiles (Gemma-3's sliding-window
layers) gets the layers' mean.  A step that carries a prompt chunk runs its decoders in the
prompt's call, on the taller prompt tile (:func:`prompt_tile_rows`: 128 rows at head dim 128),
so its co-reads save at most that tile's cap (``prompt_saving``; 0.17 on the H200, measured 247 us
saved against 545 us in a pure decode step of the same 64 readers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec
from latsim.paths import CALIBRATION

COREADS_FILE = "coreads.json"
ONE_GROUP_ROWS = 64
"""The one-warpgroup tile FA3 runs a decode call on when its query group fits (head dim 64 or 128)."""


def decode_tile_rows(head_dim: int, queries_per_kv: int, windowed: bool = False) -> int:
    """Query rows of the tile vLLM 0.25.1's FA3 (sm90) runs a pure decode call with: 64 where
    the head dim rounds to 64 or 128, the ``queries_per_kv`` query heads of a KV head fit 64
    rows and the layer has no sliding window (over a bf16 or an FP8 cache: the traced 8B's
    decode kernels are 64 x 176 and 64 x 96 tiles of 256 threads); else 192 up to head dim 96
    (Phi-3-mini: 512 threads) and 128 above (Mistral-7B's windowed layers: 384 threads)."""
    if head_dim < 1 or queries_per_kv < 1:
        raise ValueError(f"head_dim and queries_per_kv must be >= 1, got {head_dim} and {queries_per_kv}")
    rounded = next((d for d in (64, 96, 128, 192, 256) if head_dim <= d), head_dim)
    if rounded in (64, 128) and queries_per_kv <= ONE_GROUP_ROWS and not windowed:
        return ONE_GROUP_ROWS
    return prompt_tile_rows(head_dim)


def prompt_tile_rows(head_dim: int) -> int:
    """Query rows of the tile FA3 (sm90) runs a call carrying a prompt chunk with, its decoders'
    rows too: 192 up to head dim 96, 128 above (a chunked step over a shared prefix, traced on the
    H200: the decoders' co-reads saved 247 us of attention beside a 2,048-token chunk against
    545 us in a pure decode step, ``data/traces/h200/s47/shared-llama-3.1-8b``)."""
    if head_dim < 1:
        raise ValueError(f"head_dim must be >= 1, got {head_dim}")
    return 192 if head_dim <= 96 else 128


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
    work units an SM runs at once; ``source`` the file they came from; ``ridge_rows`` the decode
    tile's height whose work takes as long as its unshared KV read on that GPU, of ``peak_flops``
    bf16 FLOP/s, over a bf16 cache, ``ridge_rows_fp8`` over an FP8 one (infinite: no cap,
    :meth:`cap_at`); ``gpu_savings`` the saving measured on other GPUs, by catalog name, which
    replaces the scaled one there (:meth:`saving_at`)."""

    saving: float
    ctas_per_sm: float
    hbm_bandwidth: float
    source: str
    ridge_rows: float = math.inf
    ridge_rows_fp8: float = math.inf
    peak_flops: float = 0.0
    gpu_savings: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for gpu, saving in (("", self.saving), *self.gpu_savings):
            if not 0.0 <= saving <= 1.0:
                raise ValueError(f"co-read saving{' on ' + gpu if gpu else ''} must be within [0, 1], got {saving}")
        if self.ctas_per_sm <= 0.0:
            raise ValueError(f"ctas_per_sm must be > 0, got {self.ctas_per_sm}")
        if self.hbm_bandwidth <= 0.0:
            raise ValueError(f"hbm_bandwidth must be > 0, got {self.hbm_bandwidth}")
        for name in ("ridge_rows", "ridge_rows_fp8"):
            ridge = getattr(self, name)
            if not ridge > 0.0:
                raise ValueError(f"{name} must be > 0, got {ridge}")
            if math.isfinite(ridge) and not self.peak_flops > 0.0:
                raise ValueError(f"peak_flops must be > 0 with a finite {name}, got {self.peak_flops}")

    def saving_at(self, hbm_bandwidth: float, gpu: str = "") -> float:
        """The saving on the Hopper GPU ``gpu`` (catalog name) whose HBM moves ``hbm_bandwidth``
        bytes/s: the one measured there when :attr:`gpu_savings` holds it; else scaled, a co-read
        taking ``1 - saving`` of an HBM read where measured and the L2 read taken to cost the same
        on every Hopper die, so a faster HBM leaves less to save (the H200: 0.613 -> 0.445, where
        its own traces measured 0.35)."""
        measured = dict(self.gpu_savings).get(gpu)
        if measured is not None:
            return measured
        return min(1.0, max(0.0, 1.0 - (1.0 - self.saving) * hbm_bandwidth / self.hbm_bandwidth))

    def cap_at(self, tile_rows: int, hbm_bandwidth: float, peak_flops: float, kv_dtype: str = "bf16") -> float:
        """The most a co-read saves of a KV token's decode time where the tile holds ``tile_rows``
        query rows over a ``kv_dtype`` cache, on a GPU of ``hbm_bandwidth`` bytes/s and
        ``peak_flops`` bf16 FLOP/s: the share of that time the tile's work leaves,
        ``1 - tile_rows / ridge``, the ridge scaled from the measuring GPU by FLOP/s over
        bandwidth (1.0 without a ridge, 0.0 for a GPU without a FLOP figure)."""
        measured = self.ridge_rows_fp8 if kv_dtype == "fp8" else self.ridge_rows
        if not math.isfinite(measured):
            return 1.0
        if peak_flops <= 0.0:
            return 0.0  # no FLOP figure for the GPU: nothing known to save
        ridge = measured * (peak_flops / self.peak_flops) * (self.hbm_bandwidth / hbm_bandwidth)
        return max(0.0, 1.0 - tile_rows / ridge)

    def bind(self, sm_count: int, kv_heads: int, hbm_bandwidth: float, peak_flops: float = 0.0,
             layer_rows: Sequence[tuple[float, int]] = ((1.0, ONE_GROUP_ROWS),),
             kv_dtype: str = "bf16", gpu: str = "",
             prompt_rows: Sequence[tuple[float, int]] | None = None) -> BoundCoReads:
        """These terms on the GPU ``gpu`` (catalog name) of ``sm_count`` SMs, ``hbm_bandwidth``
        bytes/s and ``peak_flops`` bf16 FLOP/s serving ``kv_heads`` KV heads per GPU from a
        ``kv_dtype`` cache, ``layer_rows`` the share of the layers running each decode tile height
        (:func:`decode_tile_rows`), ``prompt_rows`` each one's tile in a step carrying a prompt
        chunk (:func:`prompt_tile_rows`; None: the decode tiles): each saving is the layers' mean
        of the GPU's saving (:meth:`saving_at`), each capped by its tile (:meth:`cap_at`)."""
        base = self.saving_at(hbm_bandwidth, gpu)

        def mean(rows_of: Sequence[tuple[float, int]]) -> float:
            return sum(share * min(base, self.cap_at(rows, hbm_bandwidth, peak_flops, kv_dtype))
                       for share, rows in rows_of)

        saving = mean(layer_rows)
        prompt = saving if prompt_rows is None else mean(prompt_rows)
        return BoundCoReads(self, self.ctas_per_sm * sm_count / max(1, kv_heads), saving, prompt)


@dataclass(frozen=True)
class BoundCoReads:
    """:class:`CoReads` for one deployment: ``wave`` sequences run their decode attention at once,
    a co-read saves ``saving`` of an HBM read in a pure decode step and ``prompt_saving`` in a
    step that also carries a prompt chunk (its taller tile leaves less to save)."""

    terms: CoReads
    wave: float
    saving: float
    prompt_saving: float

    def discount(self, seqs: int, groups: Sequence[tuple[int, float]], prompt: bool = False) -> float:
        """KV tokens a step's ``seqs`` decoders do not read from HBM, ``groups`` as in
        :func:`expected_saved` (sorted, so equal batches give bitwise-equal discounts);
        ``prompt``: the step carries a prompt chunk too."""
        return (self.prompt_saving if prompt else self.saving) * expected_saved(seqs, groups, self.wave)


def load_coreads(path: Path | None = None) -> CoReads | None:
    """The shipped co-read terms (``path``: another file of the same form); None when absent;
    ValueError naming the file when it is malformed."""
    path = path or CALIBRATION / COREADS_FILE
    if not path.is_file():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        ridges = data.get("ridge_rows") or {}
        ridge = {k: math.inf if ridges.get(k) is None else float(ridges[k]) for k in ("bf16", "fp8")}
        gpus = tuple(sorted((str(k), float(v["saving"])) for k, v in (data.get("gpu_savings") or {}).items()))
        return CoReads(float(data["saving"]), float(data["ctas_per_sm"]), float(data["hbm_bandwidth_gb_s"]) * 1e9,
                       str(path), ridge["bf16"], ridge["fp8"], float(data.get("peak_tflops_bf16", 0.0)) * 1e12,
                       gpus)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a co-read file ({exc}); rebuild it with scripts/fit_coreads.py") from exc


def layer_tile_rows(model: ModelSpec) -> list[tuple[float, int]]:
    """``(share of the layers, decode tile rows)`` of ``model``'s full-attention and
    sliding-window layers (:func:`decode_tile_rows`)."""
    group = model.num_heads // model.num_kv_heads
    layers = [(model.num_full_attention_layers, False), (model.num_sliding_window_layers, True)]
    return [(n / model.num_layers, decode_tile_rows(model.head_dim, group, windowed)) for n, windowed in layers if n]


def layer_prompt_rows(model: ModelSpec) -> list[tuple[float, int]]:
    """:func:`layer_tile_rows` in a step carrying a prompt chunk: every layer runs
    :func:`prompt_tile_rows` or its decode tile, the taller."""
    return [(share, max(rows, prompt_tile_rows(model.head_dim))) for share, rows in layer_tile_rows(model)]


def coreads_for(device: DeviceSpec, model: ModelSpec, tp: int = 1, kv_dtype: str = "bf16",
                path: Path | None = None) -> BoundCoReads | None:
    """The co-read terms bound to ``model`` at tensor parallelism ``tp`` on ``device`` with a
    ``kv_dtype`` cache (None off Hopper, without an SM count, or without the file): its KV heads
    per GPU set the wave, its layers' decode tiles and the cache the cap (:func:`layer_tile_rows`)."""
    if device.arch != "sm90" or not device.sm_count:
        return None
    terms = load_coreads(path)
    return None if terms is None else bind_to(terms, device, model, tp, kv_dtype)


def bind_to(terms: CoReads, device: DeviceSpec, model: ModelSpec, tp: int = 1, kv_dtype: str = "bf16") -> BoundCoReads:
    """``terms`` bound as :func:`coreads_for` binds the shipped ones (``device`` must have an SM count)."""
    return terms.bind(device.sm_count or 0, max(1, model.num_kv_heads // tp), device.hbm_bandwidth,
                      device.peak_flops.get("bf16", 0.0), layer_tile_rows(model), kv_dtype, device.name,
                      layer_prompt_rows(model))
