"""Variants for harness2: `+`-joined flags.
feat flags: ftl (loaded first-token features), pps (prompts per step), bud (budget pressure), chk (chunks)
baseline flags: blload (TTFT/E2E baseline with the loaded first token)
trees: depth=, trees=, lr=, mcw=, sub=, col=
"""
from __future__ import annotations

import numpy as np

import latsim.predict.estimators as E
import latsim.predict.features as F
import latsim.predict.surrogate as S

ORIG_FA = F.features_at
ORIG_BL = S.baseline_ms
G = np.asarray(F.BATCH_GRID, dtype=float)


def interp_g(static, prefix, n):
    vals = static[[f"{prefix}_{int(g)}" for g in G]].to_numpy()
    return F._interp(vals, np.maximum(n, 1.0))


def apply(variant: str):
    parts = variant.split("+") if variant != "base" else []
    extra_params = {}
    for p in parts:
        if "=" in p:
            k, v = p.split("=")
            if k == "depth":
                S.TREES = {**S.TREES, "max_depth": int(v)}
            elif k == "trees":
                S.TREES = {**S.TREES, "n_estimators": int(v)}
            elif k == "lr":
                S.TREES = {**S.TREES, "learning_rate": float(v)}
            elif k == "mcw":
                S.TREES = {**S.TREES, "min_child_weight": float(v)}
            elif k == "sub":
                extra_params["subsample"] = float(v)
            elif k == "col":
                extra_params["colsample_bytree"] = float(v)
            elif k == "lam":
                extra_params["lambda"] = float(v)
            elif k == "gamma":
                extra_params["gamma"] = float(v)
    if extra_params:
        orig = E._params

        def params(est, n, objective):
            out = orig(est, n, objective)
            if objective.startswith("reg:"):
                out.update(extra_params)
            return out
        E._params = params
    flags = {p for p in parts if "=" not in p}
    names = []
    if "ftl" in flags:
        names += ["log_first_token_loaded_p50_ms", "log_first_token_loaded_p99_ms", "log_ftl_over_idle_p50"]
    if "pps" in flags:
        names += ["prompts_per_step"]
    if "bud" in flags:
        names += ["budget_pressure"]
    if "chk" in flags:
        names += ["chunks_p99"]
    if "pu" in flags:
        names += ["prompt_load_wall", "prompt_load_extra"]
    if "pq" in flags:
        names += ["log_prompt_queue_ms"]
    if "puw" in flags:
        names += ["prompt_load_wall"]
    need = bool(names) or "blload" in flags

    def features_at(static, qps):
        qps = np.asarray(qps, dtype=float)
        out = ORIG_FA(static, qps)
        if not need:
            return out
        cap = np.exp(static["log_batch"].to_numpy())
        n = out["batch_share_at_load"].to_numpy() * cap
        for q in ("p50", "p90", "p99"):
            out[f"_ftl_{q}"] = interp_g(static, f"_ftl_{q}", n)
        out["_ftl_ratio_p50"] = out["_ftl_p50"] / static["_ftl_p50_1"].to_numpy()
        if "ftl" in flags:
            out["log_first_token_loaded_p50_ms"] = np.log(out["_ftl_p50"])
            out["log_first_token_loaded_p99_ms"] = np.log(out["_ftl_p99"])
            out["log_ftl_over_idle_p50"] = np.log(out["_ftl_ratio_p50"])
        r = np.minimum(qps, static["capacity_rps"].to_numpy()) / static["replicas"].to_numpy()
        step_s = np.exp(out["log_step_at_load_ms"].to_numpy()) / 1e3
        if "pps" in flags:
            out["prompts_per_step"] = r * step_s
        if "bud" in flags:
            out["budget_pressure"] = (n + r * step_s * static["_new_mean"].to_numpy()) / static["_budget"].to_numpy()
        if "chk" in flags:
            out["chunks_p99"] = static["_chunks_p99"].to_numpy()
        wall = np.exp(static["log_prompt_wall_ms"].to_numpy()) / 1e3
        if "pu" in flags:
            steps = np.maximum.accumulate(static[[f"_step_{g}" for g in F.BATCH_GRID]].to_numpy() / 1e3, axis=1)
            st = F._interp(steps, np.maximum(n, 1.0))
            p = static["_prompt_step_ms"].to_numpy() / 1e3
            la = static["_prompt_launch_ms"].to_numpy() / 1e3
            extra = np.maximum(np.maximum(p, la - st) - st, 0.0)
            out["prompt_load_wall"] = r * wall
            out["prompt_load_extra"] = r * extra
        if "puw" in flags:
            out["prompt_load_wall"] = r * wall
        if "pq" in flags:
            rho = np.minimum(r * wall, 0.98)
            cs2 = np.exp(static["in_sigma"].to_numpy() ** 2) - 1.0
            out["log_prompt_queue_ms"] = np.log(rho / (1 - rho) * wall * (1 + cs2) / 2 * 1e3 + 1e-3)
        return out

    def baseline_ms(feats, target, run_requests=0):
        base = ORIG_BL(feats, target, run_requests)
        metric, _, q = target.rpartition("_")
        if "blload" in flags and metric == "ttft_ms":
            base = base - np.exp(feats[f"log_first_token_{q}_ms"].to_numpy()) + feats[f"_ftl_{q}"].to_numpy()
        if "pkbl" in flags and metric == "ttft_ms":
            qq = {"p50": 0.5, "p90": 0.9, "p99": 0.99}[q]
            u = feats["prefill_utilization"].to_numpy()
            wall = np.exp(feats["log_prompt_wall_ms"].to_numpy())
            cs2 = np.exp(feats["in_sigma"].to_numpy() ** 2) - 1.0
            busy = wall * (1.0 + cs2) / 2.0 / (1.0 - u)
            base = base + busy * np.maximum(0.0, np.log(np.maximum(u, 1e-300) / (1.0 - qq)))
        if "blload" in flags and metric == "e2e_ms":
            ft = np.exp(feats["log_first_token_ms"].to_numpy())
            base = base + ft * (feats["_ftl_ratio_p50"].to_numpy() - 1.0)
        return base

    F.features_at = features_at
    S.features_at = features_at
    S.baseline_ms = baseline_ms
    S.FEATURES = F.FEATURES + tuple(names)
    S.LOAD_FEATURES = F.LOAD_FEATURES + tuple(n for n in names if n not in ("chunks_p99", "prompt_load_extra"))
    print("variant", variant, "features", len(S.FEATURES), "trees", S.TREES, extra_params, flush=True)
