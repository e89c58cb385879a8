"""Planning estimate of a grid's benchmark time on one H200 (not a measurement).

Per point: a fixed host cost (allocation, Python, the pre-timing GPU sleep) plus the calls the
timer makes (warm-up, estimate, repeats; see :class:`~latsim.calibration.timing.TimerSettings`)
times a roofline guess of one call at the rates measured on an H200 of this workplace
(788 TFLOP/s bf16, 4.3 TB/s copy; ``.library/device/KINDS.md``) derated for small kernels.
"""

from __future__ import annotations

from latsim.calibration import attention, gemm, memory_ops, moe
from latsim.calibration.grid import Point
from latsim.calibration.timing import TimerSettings

PLAN_FLOPS = {"bf16": 600e12, "fp8": 1100e12, "int4": 600e12}
PLAN_BW = 3.0e12
PLAN_MIN_KERNEL_S = 8e-6
PLAN_POINT_HOST_S = 4e-3
PLAN_COMM_SPAWN_S = 15.0


def op_seconds(p: Point) -> float:
    """Roofline guess of one call of ``p`` on an H200."""
    k = p.kwargs
    if p.family == "gemm":
        f, b = gemm.gemm_work(k["M"], k["K"], k["N"], k["dtype"])
        return max(f / PLAN_FLOPS[k["dtype"]], b / PLAN_BW, PLAN_MIN_KERNEL_S)
    if p.family == "attention":
        if k["phase"] == "prefill":
            f, b = attention.work(k["hq"], k["hkv"], k["d"], k["q"], attention.prefill_pairs(k["q"], k["ctx"]),
                                  k["q"] + k["ctx"])
        else:
            f, b = attention.work(k["hq"], k["hkv"], k["d"], k["batch"], k["batch"] * k["ctx"], k["batch"] * k["ctx"])
        return max(f / 350e12, b / PLAN_BW, PLAN_MIN_KERNEL_S)
    if p.family == "memory":
        f, b = memory_ops.work(k["op"], k["tokens"], k["width"])
        return max(3 * b / PLAN_BW, 3 * PLAN_MIN_KERNEL_S)
    if p.family == "moe":
        f, b, _ = moe.work(k["tokens"], k["experts"], k["top_k"], k["hidden"], k["inter"])
        return max(f / 400e12, b / PLAN_BW, 6 * PLAN_MIN_KERNEL_S)
    if p.family == "overhead":
        return k["kernels"] * 5e-6
    return 1e-3  # comm: per size


def point_seconds(p: Point, s: TimerSettings | None = None) -> float:
    """Estimated wall seconds to measure ``p`` (fixed host cost + every timed call)."""
    s = s or TimerSettings()
    t = op_seconds(p)
    reps = min(s.max_reps, max(s.min_reps, int(s.target_s / t) + 1))
    return PLAN_POINT_HOST_S + t * (s.warmup + 3 + reps)


def estimate_seconds(pts: list[Point]) -> dict[str, float]:
    """Estimated seconds per family (comm: one NCCL start per world size plus its sizes)."""
    out: dict[str, float] = {}
    for p in pts:
        out[p.family] = out.get(p.family, 0.0) + point_seconds(p)
    worlds = {p.kwargs["world"] for p in pts if p.family == "comm"}
    if worlds:
        out["comm"] = out.get("comm", 0.0) + PLAN_COMM_SPAWN_S * len(worlds)
    return out
