"""The surrogate's physics: the saturated capacity, the launch share, quantile first tokens, load features."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from latsim.costmodel.batch import BatchShape
from latsim.predict.features import (
    BASELINE_COLUMNS,
    QUEUE_FEATURES,
    features_at,
    first_token_s,
    launch_share,
    saturated_request_s,
    static_features,
)


class LinearCost:
    """A step costs ``a + b x tokens``; steps of more than ``launch_from`` tokens have a launch of
    ``launch`` seconds and a tail of ``tail`` (``launch_from=None``: none has)."""

    frontend_s = 0.002

    def __init__(self, a: float = 0.01, b: float = 1e-5, launch_from: int | None = None, launch: float = 0.0,
                 tail: float = 0.0) -> None:
        self.a, self.b, self.launch_from, self._launch, self.launch_tail_s = a, b, launch_from, launch, tail

    def step_time(self, shape: BatchShape) -> float:
        return self.a + self.b * shape.num_tokens

    def launch_s(self, shape: BatchShape) -> float:
        return self._launch if self.launch_from is not None and shape.num_tokens > self.launch_from else 0.0


def test_saturated_cycle_replaces_decode_steps_with_prompt_steps():
    # 10 running sequences of 100 output tokens, 100-token prompts: in a cycle of 100 steps the 10
    # prompts ride in 10 steps (110 tokens each) and 90 steps decode only (10 tokens each)
    got = saturated_request_s(LinearCost(), 2048, 10, 150.0, (100.0, 100.0, 0.0), 0.0, 100.0)
    assert got == pytest.approx((10 * (0.01 + 110e-5) + 90 * (0.01 + 10e-5)) / 10)


def test_a_prompt_longer_than_the_budget_is_chunked_over_full_steps():
    # 4 sequences, 1,000-token prompts, budget 104: 1,000 / 100 = 10 full steps per prompt, 40 in
    # all, more than the 20 decode steps of the cycle: every step carries 100 prompt tokens
    got = saturated_request_s(LinearCost(), 104, 4, 500.0, (1000.0, 1000.0, 0.0), 0.0, 20.0)
    assert got == pytest.approx(40 * (0.01 + 104e-5) / 4)


def test_a_launched_prompt_step_lasts_its_launch_beyond_the_step_before():
    cost = LinearCost(launch_from=50, launch=0.05, tail=0.003)
    got = saturated_request_s(cost, 2048, 10, 150.0, (100.0, 100.0, 0.0), 0.0, 100.0)
    average = 0.01 + 10e-5 + 0.1 * 100e-5  # a tenth of the 100 steps carries a prompt (Poisson: some two)
    launched = 1.0 - np.exp(-0.1)  # steps with a prompt pass the 50-token graphs and are launched
    step = (1.0 - launched) * average + launched * (0.05 + 0.003 - average)  # launched beside the step before
    assert got == pytest.approx(100 * step / 10, rel=5e-3)
    assert got > saturated_request_s(LinearCost(), 2048, 10, 150.0, (100.0, 100.0, 0.0), 0.0, 100.0)


def test_launch_share_counts_steps_over_the_room_and_is_deterministic():
    assert launch_share(-1.0, 1.0, 100.0, 0.5, 2048.0) == 1.0
    assert launch_share(10_000.0, 1.0, 100.0, 0.5, 2048.0) == 0.0
    shares = [launch_share(300.0, k, 100.0, 0.5, 2048.0) for k in (0.5, 1.0, 2.0, 4.0)]
    assert shares == sorted(shares) and 0.0 < shares[1] < shares[-1] < 1.0
    assert launch_share(300.0, 2.0, 100.0, 0.5, 2048.0) == shares[2]


def test_first_token_counts_the_front_end_chunks_and_launch():
    cost = LinearCost()
    assert first_token_s(cost, 2048, 100.0, 0.0, 50.0) == pytest.approx(0.002 + 0.01 + 101e-5)
    # 4,000 tokens in chunks of 2,048: two (and a bit) steps' worth
    assert first_token_s(cost, 2048, 4000.0, 0.0, 50.0) == pytest.approx(0.002 + (0.01 + 2049e-5) * 4000 / 2048)
    # a cached prefix is not recomputed
    assert first_token_s(cost, 2048, 1000.0, 0.9, 50.0) == pytest.approx(0.002 + 0.01 + 101e-5)
    # a prompt step past the CUDA graphs lasts at least its launch and tail on an idle deployment
    launched = LinearCost(launch_from=50, launch=0.05, tail=0.003)
    assert first_token_s(launched, 2048, 100.0, 0.0, 50.0) == pytest.approx(0.002 + 0.053)


def test_a_loaded_first_token_prices_the_running_decodes_and_their_share_of_the_budget():
    cost = LinearCost()
    # beside 49 decodes: each chunk step carries them, and a chunk holds 2,048 - 48 = 2,000 prompt tokens
    assert first_token_s(cost, 2048, 4000.0, 0.0, 50.0, decodes=49) == pytest.approx(0.002 + 2 * (0.01 + 2049e-5))
    assert first_token_s(cost, 2048, 100.0, 0.0, 50.0, decodes=1) == first_token_s(cost, 2048, 100.0, 0.0, 50.0)
    assert first_token_s(cost, 2048, 100.0, 0.0, 50.0, decodes=64) == pytest.approx(0.002 + 0.01 + 164e-5)


DEPLOYMENTS = [
    {"model": "llama-3.1-8b", "device": "h200", "tp": 1, "replicas": 1, "weight_dtype": "bf16"},
    {"model": "qwen3-30b-a3b", "device": "h100", "tp": 2, "replicas": 2, "weight_dtype": "fp8"},
]


@pytest.fixture(scope="module")
def static():
    rows = [{**d, "kv_dtype": "bf16", "max_num_seqs": np.nan, "max_num_batched_tokens": np.nan, "qps": 1.0,
             "input_median": 600.0, "input_sigma": 0.8, "output_median": 150.0, "output_sigma": 0.6,
             "prefix_share": 0.0} for d in DEPLOYMENTS]
    return static_features(pd.DataFrame(rows))


def test_first_token_and_output_quantiles_are_ordered(static):
    for row in static.itertuples():
        # a calibrated step table can dip by a fraction of a percent where the launch sets the time
        assert row.log_first_token_p50_ms <= row.log_first_token_p90_ms + 0.005
        assert row.log_first_token_p90_ms <= row.log_first_token_p99_ms + 0.005
        assert row.out_p50 < row.out_p90 < row.out_p99
        assert row.log_first_token_p50_ms <= row.log_first_token_ms  # the mean prompt is longer than the median


def test_load_features_grow_with_the_rate_below_capacity(static):
    for i in range(len(static)):
        rates = np.exp(static["log_saturated_rps"].iloc[i]) * np.linspace(0.01, 0.99, 50)
        feats = features_at(static.iloc[[i] * len(rates)], rates)
        assert np.allclose(feats["load_saturated"], np.linspace(0.01, 0.99, 50))
        for name in ("load", "load_per_batch", "prefill_utilization", "batch_share_at_load", "prompt_wall_load",
                     *BASELINE_COLUMNS):
            assert np.all(np.diff(feats[name].to_numpy()) >= -1e-12), (i, name)
        # the time per token grows while a replica's prompts, at their longer of steps and launch, fit
        # in its time (step_at_load's contract); past that a larger batch hides more of each launch
        row = static.iloc[[i]]
        per_replica = rates / row["replicas"].iloc[0]
        fits = per_replica * np.maximum(row["_prompt_step_ms"].iloc[0], row["_prompt_launch_ms"].iloc[0]) / 1e3 < 1.0
        assert fits.sum() >= 10, (i, fits.sum())
        assert np.all(np.diff(feats["log_step_at_load_ms"].to_numpy()[fits]) >= -1e-12), i
        # the prompts' wall load is the prefill utilization before its cap
        np.testing.assert_allclose(np.minimum(feats["prompt_wall_load"], 0.95), feats["prefill_utilization"])
        assert np.all(feats["prompt_extra_load"].to_numpy() >= 0.0)
        # the prompt priced beside the batch at the load: the idle first token at a vanishing rate, longer at load
        for q in ("p50", "p90", "p99"):
            at_load = feats[f"log_first_token_at_load_{q}_ms"].to_numpy()
            assert at_load[0] == pytest.approx(static[f"log_first_token_{q}_ms"].iloc[i], abs=1e-3)
            assert at_load[-1] > at_load[0]


def test_prompts_queue_more_near_capacity_and_where_they_take_the_replica(static):
    short = static_features(pd.DataFrame([{**d, "kv_dtype": "bf16", "max_num_seqs": np.nan,
                                           "max_num_batched_tokens": np.nan, "qps": 1.0, "input_median": 600.0,
                                           "input_sigma": 0.8, "output_median": 16.0, "output_sigma": 0.6,
                                           "prefix_share": 0.0} for d in DEPLOYMENTS]))
    loads = np.array([0.0, 1e-6, 0.25, 0.95])
    for i in range(len(static)):
        at = {}
        for name, rows in (("long", static), ("short", short)):
            rates = np.exp(rows["log_saturated_rps"].iloc[i]) * loads
            at[name] = features_at(rows.iloc[[i] * len(loads)], rates)[list(QUEUE_FEATURES)].to_numpy()
            np.testing.assert_array_equal(at[name][:2], 0.0)  # no rate: every request alone
            # the median queues more near capacity, and so do the tails; where a prompt's launch
            # outlasts its priced steps (the MoE row: its experts at their rows and its eager wait
            # ending with the launch since the fiftieth session), the longer decode step at load also
            # lengthens the request alone, and the tails' ratios may fall (asserted only elsewhere)
            assert at[name][3][0] > at[name][2][0], (i, name)
            row = rows.iloc[i]
            if row["_prompt_launch_ms"] <= row["_prompt_step_ms"]:
                assert at[name][3][2] > at[name][2][2] and at[name][3][1] > at[name][2][1] - 0.05, (i, name)
        # outputs of 16 tokens: prompts take most of a replica's time and queue longer at the same load
        assert np.all(at["short"][3] > at["long"][3]), i


def test_replicas_scale_only_the_capacities_and_a_cold_start_gives_the_same_features():
    from latsim.predict.features import clear_caches

    base = {"model": "llama-3.1-8b", "device": "h100", "tp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16",
            "max_num_seqs": 256, "max_num_batched_tokens": 8192, "input_median": 600.0, "input_sigma": 0.8,
            "output_median": 150.0, "output_sigma": 0.6, "prefix_share": 0.0, "qps": 5.0}
    frame = pd.DataFrame([{**base, "replicas": r} for r in (1, 3)])
    warm = static_features(frame)
    one, three = warm.iloc[0], warm.iloc[1]
    scaled = {"log_capacity_rps", "log_saturated_rps", "capacity_rps", "replicas"}
    assert three["capacity_rps"] == pytest.approx(3 * one["capacity_rps"], rel=1e-12)
    assert three["log_capacity_rps"] == pytest.approx(one["log_capacity_rps"] + np.log(3), rel=1e-12)
    assert three["replicas"] == 3.0 and one["replicas"] == 1.0
    assert (one.drop(list(scaled)) == three.drop(list(scaled))).all()
    clear_caches()
    assert static_features(frame).equals(warm)
