"""The replayed prompt queue: hand-checked steps, no cross-talk between configurations, shared steps, growth."""

from __future__ import annotations

import numpy as np
import pytest

import latsim.predict.prompt_queue as pq
from latsim.predict.prompt_queue import QUANTILES, prompt_queue

CLIP = (16, 3072)


def run(rate, *, replicas=1, d=0.01, c=1e-5, launch=0.0, room=2048.0, busy=1.0, median=500.0, sigma=0.0, prefix=0.0):
    """``prompt_queue`` over rows given by scalars or arrays (broadcast to the rates)."""
    rate = np.atleast_1d(np.asarray(rate, dtype=float))
    cols = [np.broadcast_to(np.asarray(v, dtype=float), rate.shape).copy()
            for v in (replicas, d, c, launch, room, busy, median, sigma, prefix)]
    return prompt_queue(rate, cols[0], *cols[1:], CLIP)


def test_alone_is_the_prompt_chunks_after_the_phase_and_a_step():
    # no decodes running (busy 0): no phase, no step before the first chunk; 500 tokens in one step
    _, alone = run(1e-6, busy=0.0)
    np.testing.assert_allclose(alone, 0.01 + 500 * 1e-5)
    # 3,000 tokens in steps of 2,048: a full step and one of 952, each at least the launch
    _, alone = run(1e-6, busy=0.0, median=3000.0, room=2048.0, launch=0.02, c=1e-6)
    np.testing.assert_allclose(alone, 0.02 + 0.02)
    _, alone = run(1e-6, busy=0.0, median=3000.0, room=1000.0)
    np.testing.assert_allclose(alone, 2 * (0.01 + 1000 * 1e-5) + 0.01 + 1000 * 1e-5)


def test_requests_that_never_meet_take_their_time_alone():
    sojourn, alone = run(1e-6, sigma=0.8, prefix=0.3)
    np.testing.assert_array_equal(sojourn, alone)
    assert np.all(np.diff(alone, axis=1) >= 0)  # P50 <= P90 <= P99
    # with decodes running a request first waits for the step under way and the one chosen with it
    _, busy = run(1e-6)
    assert np.all(busy[0] > 0.01 + 500 * 1e-5) and np.all(busy[0] < 3 * 0.01 + 500 * 1e-5)


def test_no_rate_is_no_queue():
    sojourn, alone = run([0.0, 1e-6])
    assert np.all(np.isfinite(sojourn))
    np.testing.assert_array_equal(sojourn[0], alone[0])


def test_a_configuration_does_not_depend_on_the_others_in_the_call(monkeypatch):
    rng = np.random.default_rng(3)
    rate = rng.uniform(1.0, 40.0, 12)
    kwargs = {"replicas": rng.integers(1, 5, 12), "d": rng.uniform(0.005, 0.03, 12), "c": rng.uniform(1e-6, 5e-5, 12),
              "launch": rng.uniform(0.0, 0.02, 12), "room": rng.uniform(500, 8000, 12), "busy": rng.uniform(0, 1, 12),
              "median": rng.uniform(64, 2048, 12), "sigma": rng.uniform(0, 1, 12), "prefix": rng.uniform(0, 0.8, 12)}
    together = run(rate, **kwargs)
    monkeypatch.setattr(pq, "_BLOCK", 2)  # blocks of two rows
    blocked = run(rate, **kwargs)
    alone = [run(rate[i], **{k: v[i] for k, v in kwargs.items()}) for i in range(12)]
    for got in (blocked, (np.vstack([a[0] for a in alone]), np.vstack([a[1] for a in alone]))):
        np.testing.assert_array_equal(got[0], together[0])
        np.testing.assert_array_equal(got[1], together[1])
    np.testing.assert_array_equal(run(rate, **kwargs)[0], together[0])  # deterministic


def test_prompts_chosen_together_share_a_step():
    # 1,600 prompts of 100 tokens arriving at once: 1,000 fit a step's budget of 100,000 tokens,
    # so nearly all first tokens come within two steps of 1 s (0.01 + 100,000 x 1e-5) -- one
    # after another they would take 1,600 steps of 0.011 s
    sojourn, alone = run(1e9, median=100.0, room=100_000.0)
    assert sojourn[0, QUANTILES.index(0.99)] < 0.01 + 2 * 1.01
    assert alone[0, 0] < 0.05


def test_the_queue_grows_with_the_rate():
    # prompts that fill a step each (1,000 tokens, room 1,000): one step of 0.02 s per prompt, a
    # single server of deterministic service, whose waits cannot shrink as arrivals come closer
    rates = np.array([1.0, 10.0, 25.0, 40.0, 47.0])
    sojourn, alone = run(rates, median=1000.0, room=1000.0)
    assert np.all(np.diff(sojourn, axis=0) >= 0)
    np.testing.assert_array_equal(alone - alone[0], 0.0)
    assert sojourn[0, 0] == pytest.approx(alone[0, 0], rel=0.01)  # at 1 req/s two seldom meet
    assert sojourn[-1, 2] > 5 * alone[-1, 2]  # at 0.94 of the server's rate the tail queues
