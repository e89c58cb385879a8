"""Case families for the differential tests: seeded random streams and the findings' repros.

Each family is a function returning a list of :class:`Case` built from its own seeded
``numpy.random.Generator``, so a family is the same list on every run and machine. The
findings (F1...) are those of ``docs/differential-findings.md``. ``neutralised`` hides F1 and
F2 (the two differences a knob can cancel) while latsim still has them, so that a family can
look past them at everything else; the probes notice when the engine is fixed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from latsim.oracle.differential import Case, latsim_records
from latsim.oracle.steprecord import StreamRequest
from latsim.oracle.vllm_build import oracle_layout

BS = 16


def _pool(rng: np.random.Generator, max_model_len: int, tight: bool, n: int) -> int:
    """Blocks: a pool vLLM accepts (one max_model_len sequence fits), tight or plentiful."""
    need = -(-max_model_len // BS)
    return need + int(rng.integers(0, need + 1)) if tight else need + 4 * n * need


def random_case(
    rng: np.random.Generator,
    label: str,
    *,
    n: tuple[int, int] = (4, 24),
    lens: tuple[int, ...] = (256, 512, 1024),
    budgets: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048),
    seqs: tuple[int, ...] = (2, 4, 8, 16, 64),
    out: tuple[int, int] = (1, 40),
    gap: int = 6,
    bursts: int = 0,
    tight: bool = False,
    groups: int = 0,
    caching: bool | None = None,
    chunked: bool = True,
    over_limit: float = 0.0,
) -> Case:
    """A random stream and config; the keyword arguments shape one family."""
    num = int(rng.integers(*n))
    max_len = int(rng.choice(lens))
    budget = int(rng.choice(budgets)) if chunked else max_len * int(rng.integers(1, 3))
    stream, step = [], 0
    burst_steps = sorted(int(s) for s in rng.integers(0, 40, size=bursts)) if bursts else []
    for i in range(num):
        if burst_steps:
            step = burst_steps[int(rng.integers(0, len(burst_steps)))]
        elif rng.random() < 0.5:
            step += int(rng.integers(0, gap))
        prompt = int(rng.integers(1, max_len // 2))
        output = min(int(rng.integers(*out)), max_len - prompt)
        if over_limit and rng.random() < over_limit:
            prompt = int(rng.integers(max_len // 2, max_len + 3))
            output = max(1, max_len - prompt + int(rng.integers(-2, 3)))
        group, shared = -1, 0
        if groups and rng.random() < 0.7:
            group = int(rng.integers(0, groups))
            shared = prompt if rng.random() < 0.4 else min(prompt, int(rng.choice([16, 32, 48, 64, 128, 256])))
        stream.append(StreamRequest(f"r{i}", step, prompt, output, group, shared))
    stream.sort(key=lambda r: r.arrival_step)
    config = dict(
        num_gpu_blocks=_pool(rng, max_len, tight, num),
        block_size=BS,
        max_num_seqs=int(rng.choice(seqs)),
        max_num_batched_tokens=budget,
        max_model_len=max_len,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=bool(rng.random() < 0.5) if caching is None else caching,
    )
    return Case(tuple(stream), config, label=label)


def shared_prompts_case(rng: np.random.Generator, label: str) -> Case:
    """Two prefix groups whose prompts are often entirely shared (duplicate blocks, F4), tight KV."""
    stream, step = [], 0
    for i in range(int(rng.integers(4, 20))):
        step += int(rng.integers(0, 4))
        prompt = int(rng.choice([16, 32, 48, 64, 128, 200]))
        shared = prompt if rng.random() < 0.6 else int(rng.integers(0, prompt + 1))
        stream.append(StreamRequest(f"r{i}", step, prompt, int(rng.integers(1, 60)), int(rng.integers(0, 2)), shared))
    config = dict(
        num_gpu_blocks=32 + int(rng.integers(0, 20)),
        block_size=BS,
        max_num_seqs=int(rng.choice([4, 8, 16])),
        max_num_batched_tokens=int(rng.choice([32, 64, 256, 512])),
        max_model_len=512,
        enable_prefix_caching=True,
    )
    return Case(tuple(stream), config, label=label)


LAYOUTS = ((1, 1), (1, 6), (0, 1), (2, 1))
"""(full, sliding) KV-cache groups: Gemma-2, Gemma-3, a model whose every layer slides, more full layers."""


def sliding_case(rng: np.random.Generator, label: str, *, tight: bool, caching: bool, groups: int = 0,
                 windows: tuple[int, ...] = (32, 64, 100, 256)) -> Case:
    """A :func:`random_case` over KV-cache groups of which some slide (windows of 32-256 tokens,
    requests of up to 120 outputs, so that most outgrow their window), in a pool vLLM accepts."""
    base = random_case(rng, label, tight=tight, caching=caching, groups=groups, n=(6, 30), out=(1, 120))
    full, sliding = LAYOUTS[int(rng.integers(0, len(LAYOUTS)))]
    config = dict(base.config, kv_full_groups=full, kv_sliding_groups=sliding,
                  sliding_window=int(rng.choice(windows)))
    need = oracle_layout(config).admission(config["max_model_len"], BS)
    config["num_gpu_blocks"] = need + int(rng.integers(1, need + 2)) if tight else 20 * need
    return Case(base.stream, config, label=label)


def _family(seed: int, count: int, name: str, make: Callable[..., Case], **kw) -> list[Case]:
    rng = np.random.default_rng(seed)
    return [make(rng, f"{name}-{i}", **kw) for i in range(count)]


# --- findings' minimal streams (docs/differential-findings.md) -------------------------------

R = StreamRequest
REPROS: dict[str, Case] = {
    "F1": Case(
        (R("a", 0, 17, 2), R("b", 0, 16, 1)),
        dict(num_gpu_blocks=3, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=32),
        label="F1 null block",
    ),
    "F2": Case(
        (R("a", 0, 40, 30), R("b", 0, 150, 10)),
        dict(num_gpu_blocks=12, max_num_seqs=4, max_num_batched_tokens=48, max_model_len=192),
        label="F2 full-prompt admission gate",
    ),
    "F3": Case(
        (R("a", 0, 32, 1, 0, 32), R("b", 0, 8, 1), R("c", 1, 48, 1), R("d", 2, 40, 1, 0, 32)),
        dict(num_gpu_blocks=6, max_num_seqs=4, max_num_batched_tokens=256, max_model_len=64),
        label="F3 unhashed blocks are reused first",
    ),
    "F4": Case(
        (R("a", 0, 32, 1, 0, 32), R("b", 1, 32, 8, 0, 32), R("c", 2, 48, 1), R("d", 3, 48, 1, 0, 32)),
        dict(num_gpu_blocks=7, max_num_seqs=4, max_num_batched_tokens=256, max_model_len=64),
        label="F4 duplicate full blocks are cached too",
    ),
    "F5": Case(
        (R("a", 0, 16, 2), R("b", 0, 16, 1)),
        dict(num_gpu_blocks=8, max_num_seqs=1, max_num_batched_tokens=64, max_model_len=64, async_scheduling=True),
        label="F5 asynchronous scheduling",
    ),
    "F6": Case(
        (R("empty", 0, 0, 3), R("a", 0, 10, 2)),
        dict(num_gpu_blocks=8, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64),
        label="F6 empty prompt",
    ),
}


@functools.cache
def latsim_reserves_null_block() -> bool:
    """F1 fixed? (latsim alone: with 3 blocks, vLLM has room for ``a`` only at step 0)."""
    return "b" not in dict(latsim_records(REPROS["F1"])[0].scheduled)


@functools.cache
def latsim_gates_full_prompt() -> bool:
    """F2 fixed? (latsim alone: ``b``'s whole prompt does not fit, so it must not start at step 0)."""
    return "b" not in dict(latsim_records(REPROS["F2"])[0].scheduled)


def neutralised(case: Case) -> Case:
    """``case`` with F1 and F2 cancelled while latsim still has them.

    F1: latsim is given one block less (vLLM's null block). F2: vLLM runs with
    ``scheduler_reserve_full_isl=False``.
    """
    latsim, oracle = dict(case.latsim), dict(case.oracle)
    if not latsim_reserves_null_block():
        latsim["num_gpu_blocks"] = latsim.get("num_gpu_blocks", case.config["num_gpu_blocks"]) - 1
    if not latsim_gates_full_prompt():
        oracle["scheduler_reserve_full_isl"] = False
    return replace(case, latsim=latsim, oracle=oracle)


def asynchronous(cases: list[Case]) -> list[Case]:
    return [replace(c, config={**c.config, "async_scheduling": True}, label="async " + c.label) for c in cases]


# --- families ------------------------------------------------------------------------------


def _sync_mix(seed: int, count: int) -> list[Case]:
    """A bit of every easy family (for the asynchronous runs)."""
    per = count // 6
    return (
        _family(seed, per, "bursts", random_case, bursts=2)
        + _family(seed + 1, per, "arrivals", random_case)
        + _family(seed + 2, per, "cap", random_case, seqs=(1, 2, 3, 4), n=(5, 30), out=(1, 20))
        + _family(seed + 3, per, "prefix", random_case, groups=3, caching=True)
        + _family(seed + 4, per, "limit", random_case, lens=(64, 128, 256), over_limit=0.3)
        + _family(seed + 5, count - 5 * per, "pressure", random_case, tight=True, caching=False)
    )


def decode_stream() -> list[StreamRequest]:
    """64 sequences of 512 prompt tokens decoding 1,024 tokens each: the speed comparison."""
    return [StreamRequest(f"r{i}", 0, 512, 1024) for i in range(64)]


DECODE_CONFIG = dict(num_gpu_blocks=8192, max_num_seqs=64, max_num_batched_tokens=8192, max_model_len=4096)

FAMILIES: dict[str, Callable[[], list[Case]]] = {
    "bursts": lambda: _family(101, 70, "bursts", random_case, bursts=3),
    "arrivals": lambda: _family(102, 70, "arrivals", random_case),
    "long_prompts": lambda: _family(
        103, 40, "long", random_case, n=(2, 8), lens=(4096,), budgets=(256, 512, 1024), out=(1, 10),
    ),
    "seq_cap": lambda: _family(104, 60, "cap", random_case, seqs=(1, 2, 3, 4), n=(5, 30), out=(1, 20)),
    "prefix_groups": lambda: _family(105, 70, "prefix", random_case, groups=3, caching=True),
    "max_model_len": lambda: _family(106, 60, "limit", random_case, lens=(64, 128, 256), over_limit=0.3),
    "no_chunking": lambda: _family(107, 60, "nochunk", random_case, chunked=False),
    "kv_pressure": lambda: [
        neutralised(c) for c in _family(108, 90, "pressure", random_case, tight=True, caching=False)
    ],
    "kv_pressure_exact": lambda: _family(109, 40, "pressure-exact", random_case, tight=True, caching=False),
    "kv_pressure_cached": lambda: [
        neutralised(c) for c in _family(110, 80, "pressure-cached", random_case, tight=True, caching=True)
    ],
    "prefix_pressure": lambda: [
        neutralised(c)
        for c in _family(111, 60, "prefix-pressure", shared_prompts_case)
        + _family(112, 30, "prefix-pressure-mixed", random_case, tight=True, groups=2, caching=True)
    ],
    "async_mix": lambda: asynchronous(_sync_mix(200, 360)),
    "sliding_pressure": lambda: _family(120, 60, "sliding-pressure", sliding_case, tight=True, caching=False)
    + asynchronous(_family(121, 30, "sliding-async", sliding_case, tight=True, caching=False)),
    "sliding_cached": lambda: _family(122, 40, "sliding-cached", sliding_case, tight=False, caching=True, groups=3),
    "sliding_cached_pressure": lambda: _family(123, 60, "sliding-cached-pressure", sliding_case, tight=True,
                                               caching=True, groups=2, windows=(32, 64, 256))
    + asynchronous(_family(124, 30, "sliding-cached-async", sliding_case, tight=True, caching=True, groups=2,
                           windows=(32, 64, 256))),
    "repros": lambda: [c if name in ("F1", "F2") else neutralised(c) for name, c in REPROS.items()],
    "speed": lambda: [Case(tuple(decode_stream()), DECODE_CONFIG, label="64-sequence decode")],
}
