"""Monkeypatched variants of latsim.predict.features / surrogate for the harness."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import norm

import latsim.predict.features as F
import latsim.predict.surrogate as S

ORIG_FEATURES_AT = F.features_at
ORIG_BASELINE = S.baseline_ms
N_RUN = 1600
RHO_MAX = 0.95
FLUIDC = False
PREFILL = ""


def p_wait(rho, c, kind):
    if kind == "mm1":
        return np.minimum(rho, 1.0)
    if kind == "none":
        return np.zeros_like(rho)
    beta = np.maximum(1.0 - rho, 0.0) * np.sqrt(c)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(beta > 0, beta * norm.cdf(beta) / norm.pdf(beta), 0.0)
    return 1.0 / (1.0 + r)


def queue_parts(static, qps, kind):
    """(T ms, rho, P(wait), 1/(1-rho_c))"""
    cap = static["capacity_rps"].to_numpy()
    rep = static["replicas"].to_numpy()
    T = rep / cap * 1e3  # ms per request of one replica at saturation
    rho = qps / cap
    rc = np.minimum(rho, RHO_MAX)
    pw = p_wait(rc, static["batch"].to_numpy(), kind)
    return T, rho, pw, 1.0 / (1.0 - rc)


def make(kind, fluid, feature, in_baseline):
    names = []
    if feature:
        names.append("log_queue_wait_ms")
    if fluid and feature:
        names.append("log_overload_wait_ms")

    def features_at(static, qps):
        qps = np.asarray(qps, dtype=float)
        out = ORIG_FEATURES_AT(static, qps)
        T, rho, pw, inv = queue_parts(static, qps, kind)
        out["_T"] = T
        out["_pw"] = pw
        out["_inv"] = inv
        cap = static["capacity_rps"].to_numpy()
        out["_fluid_per_q"] = N_RUN * np.maximum(0.0, 1.0 / cap - 1.0 / np.maximum(qps, 1e-12)) * 1e3 if fluid else 0.0
        out["_slots"] = (static["batch"] * static["replicas"]).to_numpy()
        out["_cap"] = cap
        out["_qps"] = qps
        if feature:
            out["log_queue_wait_ms"] = np.log(pw * T * inv + 1e-3) if kind != "none" else 0.0
            if fluid:
                out["log_overload_wait_ms"] = np.log(out["_fluid_per_q"].to_numpy() * 0.5 + 1e-3)
        return out

    def wait_q(feats, q):
        T, pw, inv = feats["_T"].to_numpy(), feats["_pw"].to_numpy(), feats["_inv"].to_numpy()
        w = T * inv * np.maximum(0.0, np.log(np.maximum(pw, 1e-300) / (1.0 - q)))
        if FLUIDC:
            k = q * N_RUN
            cap, lam, slots = feats["_cap"].to_numpy(), feats["_qps"].to_numpy(), feats["_slots"].to_numpy()
            return w + np.where(lam > cap, np.maximum(0.0, (k - slots) / cap - k / np.maximum(lam, 1e-12)), 0.0) * 1e3
        return w + np.asarray(feats["_fluid_per_q"], dtype=float) * q

    def baseline_ms(feats, target, run_requests=0):
        base = ORIG_BASELINE(feats, target, run_requests)
        metric, _, qs = target.rpartition("_")
        if PREFILL and metric in ("ttft_ms", "e2e_ms"):
            q = {"p50": 0.5, "p90": 0.9, "p99": 0.99}[qs]
            u = feats["prefill_utilization"].to_numpy()
            first = np.exp(feats[f"log_first_token_{qs}_ms" if metric == "ttft_ms" else "log_first_token_ms"].to_numpy())
            if PREFILL == "ps":
                base = base + first * u / (1.0 - u)
            else:  # FCFS M/G/1 (Pollaczek-Khinchine), exponential tail: quantile q of the wait
                wall = np.exp(feats["log_prompt_wall_ms"].to_numpy())
                cs2 = np.exp(feats["in_sigma"].to_numpy() ** 2) - 1.0
                mean_busy = wall * (1.0 + cs2) / 2.0 / (1.0 - u)  # mean wait given one waits
                base = base + mean_busy * np.maximum(0.0, np.log(np.maximum(u, 1e-300) / (1.0 - q)))
        if in_baseline and metric in ("ttft_ms", "e2e_ms"):
            q = {"p50": 0.5, "p90": 0.9, "p99": 0.99}[qs]
            base = base + wait_q(feats, q)
        return base

    return names, features_at, baseline_ms


def patch_objective(parts):
    import latsim.predict.estimators as E
    orig = E._params
    obj = next((p for p in parts if p.startswith("obj=")), None)
    if obj is None:
        return
    name = obj[4:]

    def params(est, n, objective):
        out = orig(est, n, objective)
        if objective == "reg:squarederror":
            if name == "abs":
                out["objective"] = "reg:absoluteerror"
            elif name.startswith("huber"):
                out["objective"] = "reg:pseudohubererror"
                out["huber_slope"] = float(name[5:])
        return out
    E._params = params


def patch_exact():
    orig = S.Surrogate.predict_static

    def predict_static(self, static, qps):
        out = orig(self, static, qps)
        feats = S.features_at(static, np.asarray(qps, dtype=float))
        X = feats[list(S.FEATURES)].to_numpy(dtype=np.float64)
        for target, reg in self.regressors.items():
            out[target] = S.baseline_ms(feats, target, self.run_requests) * np.exp(reg.predict(X))
        return out
    S.Surrogate.predict_static = predict_static


def apply(variant: str):
    if variant == "base":
        return
    parts = variant.split("+")
    if "exact" in parts:
        patch_exact()
    patch_objective(parts)
    for p in parts:
        if p.startswith("trees="):
            S.TREES = {**S.TREES, "n_estimators": int(p[6:])}
        if p.startswith("lr="):
            S.TREES = {**S.TREES, "learning_rate": float(p[3:])}
        if p.startswith("depth="):
            S.TREES = {**S.TREES, "max_depth": int(p[6:])}
    parts = [p for p in parts if "=" not in p]
    if not parts:
        return
    kind = "hw" if "hw" in parts else "none" if "none" in parts else "mm1"
    global FLUIDC, PREFILL
    PREFILL = "ps" if "ps" in parts else "pk" if "pk" in parts else ""
    FLUIDC = "fluidc" in parts
    fluid = "fluid" in parts or FLUIDC
    feature = "feat" in parts
    in_baseline = "bl" in parts
    names, fa, bl = make(kind, fluid, feature, in_baseline)
    F.features_at = fa
    S.features_at = fa
    S.baseline_ms = bl
    S.FEATURES = F.FEATURES + tuple(names)
    S.LOAD_FEATURES = F.LOAD_FEATURES + tuple(names)
    if "rbm" in parts or "rbmc" in parts:
        apply_rbm("rbmc" in parts)
    if "fluidc2" in parts:
        apply_fluidc()
    if "mid" in parts or "fine" in parts or "lite" in parts or "log" in parts or "midtpot" in parts:
        patch_grid("mid" if "mid" in parts else "midtpot" if "midtpot" in parts else "max", "fine" in parts,
                   "lite" in parts, "log" in parts)
    print("variant", variant, "features", len(S.FEATURES))


def rbm_wait_ms(feats, q, N, offset):
    """Mean wait (ms) of the q*N-th request: sup of a drifted BM (arrivals minus services) over its
    arrival time, less the free slots ``offset`` (requests), over the saturated capacity."""
    mu = np.exp(feats["log_saturated_rps"].to_numpy())
    lam = feats["load_saturated"].to_numpy() * mu
    k = q * N
    t = k / np.maximum(lam, 1e-12)
    m = lam - mu
    s = np.sqrt((lam + mu) * t)  # sigma sqrt(t)
    if offset is None:
        z = m * t / s
        small = np.abs(z) < 1e-6
        msafe = np.where(small, 1.0, m)
        third = np.where(small, norm.pdf(0.0) * s, ((lam + mu) / (2 * msafe)) * (2 * norm.cdf(z) - 1))
        em = m * t * norm.cdf(z) + s * norm.pdf(z) + third
    else:
        c = offset
        u = np.linspace(0.0, 1.0, 129)[None, :]
        span = np.maximum(m * t, 0.0) + 8 * s
        y = c[:, None] + span[:, None] * u
        mt, ss = (m * t)[:, None], s[:, None]
        sig2 = (lam + mu)[:, None]
        tail = norm.sf((y - mt) / ss) + np.exp(np.minimum(2 * m[:, None] * y / sig2 + norm.logcdf((-y - mt) / ss), 50))
        em = np.trapezoid(np.minimum(tail, 1.0), y, axis=1)
    return np.maximum(em, 0.0) / mu * 1e3


def apply_rbm(offset: bool):
    def baseline_ms(feats, target, run_requests=0):
        base = ORIG_BASELINE(feats, target, 0)
        metric, _, qs = target.rpartition("_")
        if metric in ("ttft_ms", "e2e_ms") and run_requests:
            q = {"p50": 0.5, "p90": 0.9, "p99": 0.99}[qs]
            off = (np.exp(feats["log_batch"].to_numpy()) * feats["replicas"].to_numpy()) if offset else None
            base = base + rbm_wait_ms(feats, q, run_requests, off)
        return base
    S.baseline_ms = baseline_ms


def apply_fluidc():
    def baseline_ms(feats, target, run_requests=0):
        base = ORIG_BASELINE(feats, target, 0)
        metric, _, qs = target.rpartition("_")
        if metric in ("ttft_ms", "e2e_ms") and run_requests:
            q = {"p50": 0.5, "p90": 0.9, "p99": 0.99}[qs]
            mu = np.exp(feats["log_saturated_rps"].to_numpy())
            lam = feats["load_saturated"].to_numpy() * mu
            slots = np.exp(feats["log_batch"].to_numpy()) * feats["replicas"].to_numpy()
            k = q * run_requests
            base = base + np.where(lam > mu, np.maximum(0.0, (k - slots) / mu - k / lam), 0.0) * 1e3
        return base
    S.baseline_ms = baseline_ms


def patch_grid(mode: str, fine: bool, lite: bool = False, log: bool = False):
    import latsim.predict.surrogate as SS
    if fine:
        SS.LOAD_GRID = np.round(np.concatenate([np.arange(0.0, 1.6, 0.025), [1.6, 1.8, 2.0, 2.5, 3.0]]), 3)
    if lite:
        SS.LOAD_GRID = np.round(np.concatenate([np.arange(0.0, 0.6, 0.1), np.arange(0.6, 1.5, 0.025),
                                                [1.5, 1.6, 1.8, 2.0, 2.5, 3.0]]), 3)

    def predict_static(self, static, qps):
        qps = np.asarray(qps, dtype=float)
        out = pd.DataFrame(index=static.index)
        codes, first = SS._distinct(static)
        distinct = static.iloc[first]
        capacity = distinct["capacity_rps"].to_numpy()
        G = SS.LOAD_GRID
        loads = np.tile(G, len(distinct))
        grid = SS.features_at(distinct.iloc[np.repeat(np.arange(len(distinct)), len(G))],
                              loads * np.repeat(capacity, len(G)))
        X = grid[list(SS.FEATURES)].to_numpy(dtype=np.float64)
        load = qps / capacity[codes]
        for target, reg in self.regressors.items():
            raw = (SS.baseline_ms(grid, target, self.run_requests) * np.exp(reg.predict(X))).reshape(len(distinct), len(G))
            if mode == "mid" or (mode == "midtpot" and target.startswith("tpot")):
                mono = 0.5 * (np.maximum.accumulate(raw, axis=1) + np.minimum.accumulate(raw[:, ::-1], axis=1)[:, ::-1])
            else:
                mono = np.maximum.accumulate(raw, axis=1)
            out[target] = np.exp(SS._interp_rows(np.log(mono)[codes], load)) if log else SS._interp_rows(mono[codes], load)
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            out[f"{metric}_p90"] = np.maximum(out[f"{metric}_p90"], out[f"{metric}_p50"])
            out[f"{metric}_p99"] = np.maximum(out[f"{metric}_p99"], out[f"{metric}_p90"])
        out["stable_probability"] = self._stable_probability(X, len(distinct), codes, load)
        out["stable"] = out["stable_probability"] >= 0.5
        return out
    SS.Surrogate.predict_static = predict_static
