"""A small deterministic simulation of one replica's prompt queue, vectorised across configurations.

The surrogate's mean-value features price a prompt on its own (:func:`latsim.predict.features.first_token_at_load`);
where prompts take most of a replica's time they also wait for each other: vLLM v1 gives every
step one token budget, the running decodes first, then the waiting prompts first come first
served, so a prompt that arrives behind others waits for their chunks, and short prompts that
arrive together share a step.  :func:`prompt_queue` replays one fixed stream of requests (common
random numbers: the same seeded Poisson gaps, prompt-length draws and step phases for every
configuration, so the answer is deterministic and smooth in the rate) through that queue for
every configuration at once, a loop over the requests with arrays over the configurations.

The model of one replica whose running batch is ``n`` decodes (the batch at the load,
:func:`latsim.predict.features.step_at_load`), priced by :func:`latsim.predict.features.queue_at_load`:
a step with ``x`` prompt tokens lasts ``max(d + c x, launch)`` (``d`` the decode step at ``n``,
``c`` a prompt token's share of the mean prompt's priced steps over it, ``launch`` the prompt's
launch per chunk) and holds at most ``room = budget - n`` prompt tokens; decode-only steps of
``d`` run between.  Scheduling is asynchronous, as in the simulator (:mod:`latsim.engines.vllm.scheduler`):
a step's prompts are chosen when the step before it starts, so a request arriving on an idle
queue waits for the step under way (a fixed uniform phase of ``d``) and one more; one arriving
before the last prompt step was chosen joins it while it has room; one arriving later waits for
its end (and a step more if it arrived after that step started).  A prompt longer than the room
runs in full steps, its last chunk in a step others may join.  A request's first token comes at
the end of the step that takes its last prompt token (the earlier requests of a step that a later
one joins keep its shorter end: a small optimism).  With no decodes running (``n`` < 1) the phase
and the extra step shrink with ``n``.
"""

from __future__ import annotations

import numpy as np

RUN_REQUESTS = 1600
"""Requests of the replayed stream over all replicas (the training runs' length): replica 0 of
``R`` round-robin replicas gets every ``R``-th of them."""
_SEED = 20261216
_rng = np.random.default_rng(_SEED)
_GAPS = _rng.standard_exponential(RUN_REQUESTS)
_ARRIVALS = np.concatenate([[0.0], np.cumsum(_GAPS[1:])])
"""Arrival times of the stream at rate 1 (the recipe's trace: the first request at 0)."""
_Z = _rng.standard_normal(RUN_REQUESTS)
_PHASE = _rng.uniform(size=RUN_REQUESTS)
QUANTILES = (0.5, 0.9, 0.99)
"""The quantiles over a replica's requests that :func:`prompt_queue` reports (nearest rank)."""
_BLOCK = 4096
"""Configurations per replay (bounds its two arrays of ``requests x configurations`` floats)."""


def prompt_queue(rate: np.ndarray, replicas: np.ndarray, decode_s: np.ndarray, token_s: np.ndarray,
                 launch_s: np.ndarray, room: np.ndarray, busy: np.ndarray, input_median: np.ndarray,
                 input_sigma: np.ndarray, prefix_share: np.ndarray, clip: tuple[int, int]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(sojourn, alone)``: per configuration (row) the :data:`QUANTILES` (columns) over the
    replica's requests of the seconds from a request's arrival to the end of the step that takes
    its last prompt token, in the queue and alone (the same request on an idle queue: its phase,
    its steps).

    ``rate`` is the offered rate over all ``replicas`` (req/s); a step with ``x`` > 0 prompt
    tokens lasts ``max(decode_s + token_s x, launch_s)`` and holds at most ``room`` of them;
    ``busy`` scales the phase (the share of a decode step an arrival on an idle queue waits);
    prompt lengths are lognormal(``input_median``, ``input_sigma``) rounded and clipped to
    ``clip``, of which ``prefix_share`` is cached."""
    n = len(rate)
    sojourn = np.empty((n, len(QUANTILES)))
    alone = np.empty((n, len(QUANTILES)))
    reps = np.asarray(replicas).astype(int)
    columns = np.stack([np.asarray(c, dtype=float) for c in (rate, decode_s, token_s, launch_s, room, busy,
                                                             input_median, input_sigma, prefix_share)])
    for k in np.unique(reps):
        rows = np.flatnonzero(reps == k)
        for start in range(0, len(rows), _BLOCK):
            sel = rows[start:start + _BLOCK]
            sojourn[sel], alone[sel] = _replay(int(k), columns[:, sel], clip)
    return sojourn, alone


def _replay(replicas: int, columns: np.ndarray, clip: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`prompt_queue` for configurations of one replica count (``columns``: its arguments
    from ``rate`` to ``prefix_share``, one row each): replica 0's requests of the stream, a loop
    over them with arrays over the configurations."""
    rate, d, c, launch, room, busy, median, sigma, prefix = columns
    idx = np.arange(0, RUN_REQUESTS, max(1, replicas))
    rate = np.maximum(rate, 1e-9)  # no rate: the requests never meet
    waits = np.empty((len(rate), len(idx)))   # one row per configuration, one column per request
    alone = np.empty_like(waits)
    full = np.maximum(d + c * room, launch)  # a step whose budget prompts fill
    keep = 1.0 - prefix
    lag = d * busy                           # a decode step, when decodes run
    # times are kept relative to the request at hand (no cancellation at long arrival times)
    began = np.full(len(rate), -1e30)        # start of the last step holding prompt tokens
    decided = np.full(len(rate), -1e30)      # when its tokens were chosen (the step before's start)
    used = np.zeros(len(rate))               # its prompt tokens
    gaps = np.diff(_ARRIVALS[idx], prepend=0.0)
    for j, i in enumerate(idx):
        gap = gaps[j] / rate
        began -= gap
        decided -= gap
        tokens = np.maximum(1.0, np.clip(np.rint(median * np.exp(sigma * _Z[i])), *clip) * keep)
        phase = _PHASE[i] * lag
        ahead = np.ceil(tokens / room) - 1.0  # full steps before its last
        alone[:, j] = phase + lag + ahead * full + np.maximum(d + c * (tokens - ahead * room), launch)
        x = np.where(decided >= 0.0, np.minimum(tokens, room - used), 0.0)
        used += x
        w = tokens - x
        end = began + np.maximum(d + c * used, launch)
        more = w > 0
        # its first step is chosen at the next step start after its arrival and runs a step later
        running = began >= 0.0
        chosen = np.where(running, began, np.where(end >= 0.0, end, phase))
        first = np.where(running, end, chosen + lag)
        ahead = np.maximum(np.ceil(w / room) - 1.0, 0.0)
        began = np.where(more, first + ahead * full, began)
        decided = np.where(more, np.where(ahead > 0, began - full, chosen), decided)
        used = np.where(more, w - ahead * room, used)
        waits[:, j] = np.where(more, began + np.maximum(d + c * used, launch), end)
    return _order_statistics(waits), _order_statistics(alone)


def _order_statistics(values: np.ndarray) -> np.ndarray:
    """The :data:`QUANTILES` of every row of ``values`` (nearest rank ``round(q (m - 1))`` of ``m``),
    partitioning ``values`` in place."""
    ranks = [round(q * (values.shape[1] - 1)) for q in QUANTILES]
    values.partition(ranks, axis=1)
    return values[:, ranks]
