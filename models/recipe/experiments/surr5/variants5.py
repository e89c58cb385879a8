"""Variants for harness5: `+`-joined flags over the package as it is (`base`: the shipped fit).
msf: log(sojourn_q / alone_q) of the replayed prompt queue as three features (q = P50, P90, P99)
msx: log1p(excess_q ms) as three features, excess_q = sojourn_q - alone_q
msb: the TTFT baseline plus excess_q;  mse: the E2E baselines plus excess_p50
msr: the TTFT baseline's first token times sojourn_q / alone_q
n=K: replay K requests (over all replicas) instead of 1,600
trees: mcw=, depth=, trees="""
from __future__ import annotations

import numpy as np

import latsim.predict.features as F
import latsim.predict.prompt_queue as Q
import latsim.predict.surrogate as S

ORIG_FA = F.features_at
ORIG_BL = S.baseline_ms


def queue(static, qps, batch):
    cap = static["capacity_rps"].to_numpy()
    rate = np.minimum(qps, cap)
    d = F._interp(F._batch_grid(static, "_step", 1e3), np.maximum(batch, 1.0))
    prompt, launch = F._prompt_s(static)
    prefix = static["prefix_share"].to_numpy()
    new = np.maximum(1.0, static["mean_in"].to_numpy() * (1.0 - prefix))
    budget = np.exp(static["log_max_num_batched_tokens"].to_numpy())
    c = np.maximum(prompt - d, 0.0) / new
    step_launch = launch / np.maximum(1.0, new / budget)
    room = np.maximum(1.0, budget - batch)
    busy = np.minimum(batch, 1.0)
    return Q.prompt_queue(rate, static["replicas"].to_numpy(), d, c, step_launch, room, busy,
                          static["_input_median"].to_numpy(),
                          static["in_sigma"].to_numpy(), prefix, F.INPUT_CLIP)


ORIG_REPLAY = Q._replay


def lindley(replicas, rate, d, c, launch, room, busy, median, sigma, prefix, clip):
    """The simpler variant: a Lindley recursion, each prompt's steps its own (no shared steps,
    no asynchronous choice): done_i = max(done_{i-1}, t_i + phase_i + lag) + its steps."""
    idx = np.arange(0, Q.RUN_REQUESTS, max(1, replicas))
    rate = np.maximum(rate, 1e-9)
    waits = np.empty((len(rate), len(idx)))
    alone = np.empty_like(waits)
    full = np.maximum(d + c * room, launch)
    lag = d * busy
    done = np.full(len(rate), -1e30)
    for j, i in enumerate(idx):
        t = Q._ARRIVALS[i] / rate
        tokens = np.maximum(1.0, np.clip(np.rint(median * np.exp(sigma * Q._Z[i])), *clip) * (1.0 - prefix))
        phase = Q._PHASE[i] * lag
        ahead = np.ceil(tokens / room) - 1.0
        own = ahead * full + np.maximum(d + c * (tokens - ahead * room), launch)
        alone[:, j] = phase + lag + own
        done = np.maximum(done, t + phase + lag) + own
        waits[:, j] = done - t
    return Q._order_statistics(waits), Q._order_statistics(alone)


def sync_replay(replicas, rate, d, c, launch, room, busy, median, sigma, prefix, clip):
    """The first version: a step's prompts chosen when it starts (no asynchronous scheduling)."""
    idx = np.arange(0, Q.RUN_REQUESTS, max(1, replicas))
    rate = np.maximum(rate, 1e-9)
    waits = np.empty((len(rate), len(idx)))
    alone = np.empty_like(waits)
    full = np.maximum(d + c * room, launch)
    scale = d * busy
    began = np.full(len(rate), -1e30)
    used = np.zeros(len(rate))
    for j, i in enumerate(idx):
        t = Q._ARRIVALS[i] / rate
        tokens = np.maximum(1.0, np.clip(np.rint(median * np.exp(sigma * Q._Z[i])), *clip) * (1.0 - prefix))
        phase = Q._PHASE[i] * scale
        ahead = np.ceil(tokens / room) - 1.0
        alone[:, j] = phase + ahead * full + np.maximum(d + c * (tokens - ahead * room), launch)
        x = np.where(t <= began, np.minimum(tokens, room - used), 0.0)
        used += x
        w = tokens - x
        end = began + np.maximum(d + c * used, launch)
        more = w > 0
        ahead = np.maximum(np.ceil(w / room) - 1.0, 0.0)
        began = np.where(more, np.maximum(end, t + phase) + ahead * full, began)
        used = np.where(more, w - ahead * room, used)
        waits[:, j] = np.where(more, began + np.maximum(d + c * used, launch), end) - t
    return Q._order_statistics(waits), Q._order_statistics(alone)


def apply(variant: str):
    parts = variant.split("+") if variant != "base" else []
    for p in parts:
        if "=" in p:
            k, v = p.split("=")
            if k == "mcw":
                S.TREES = {**S.TREES, "min_child_weight": float(v)}
            elif k == "depth":
                S.TREES = {**S.TREES, "max_depth": int(v)}
            elif k == "trees":
                S.TREES = {**S.TREES, "n_estimators": int(v)}
            elif k == "n":
                Q.RUN_REQUESTS = int(v)
    flags = {p for p in parts if "=" not in p}
    Q._replay = lindley if "lind" in flags else sync_replay if "sync" in flags else ORIG_REPLAY
    names = []
    if "msf" in flags:
        names += [f"log_queue_over_alone_{q}" for q in ("p50", "p90", "p99")]
    if "msx" in flags:
        names += [f"log1p_queue_excess_{q}_ms" for q in ("p50", "p90", "p99")]
    need = bool(flags & {"msf", "msx", "msb", "mse", "msr"})

    def features_at(static, qps):
        qps = np.asarray(qps, dtype=float)
        out = ORIG_FA(static, qps)
        if not need:
            return out
        batch = out["batch_share_at_load"].to_numpy() * np.exp(static["log_batch"].to_numpy())
        soj, alone = queue(static, qps, batch)
        for j, q in enumerate(("p50", "p90", "p99")):
            out[f"_soj_{q}"] = soj[:, j] * 1e3
            out[f"_alone_{q}"] = alone[:, j] * 1e3
            if "msf" in flags:
                out[f"log_queue_over_alone_{q}"] = np.log(soj[:, j] / alone[:, j])
            if "msx" in flags:
                out[f"log1p_queue_excess_{q}_ms"] = np.log1p(np.maximum(soj[:, j] - alone[:, j], 0.0) * 1e3)
        return out

    def baseline_ms(feats, target, run_requests=0):
        base = ORIG_BL(feats, target, run_requests)
        metric, _, q = target.rpartition("_")
        if metric == "ttft_ms" and "msb" in flags:
            base = base + np.maximum(feats[f"_soj_{q}"].to_numpy() - feats[f"_alone_{q}"].to_numpy(), 0.0)
        if metric == "ttft_ms" and "msr" in flags:
            first = np.exp(feats[f"log_first_token_at_load_{q}_ms"].to_numpy())
            base = base + first * (feats[f"_soj_{q}"].to_numpy() / feats[f"_alone_{q}"].to_numpy() - 1.0)
        if metric == "e2e_ms" and "mse" in flags:
            base = base + np.maximum(feats["_soj_p50"].to_numpy() - feats["_alone_p50"].to_numpy(), 0.0)
        return base

    F.features_at = features_at
    S.features_at = features_at
    S.baseline_ms = baseline_ms
    S.FEATURES = F.FEATURES + tuple(names)
    print("variant", variant, "features", len(S.FEATURES), "trees", S.TREES, "run", Q.RUN_REQUESTS, flush=True)
