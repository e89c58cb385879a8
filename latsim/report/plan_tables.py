"""Tables of the planner's answers (rich renderables)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

SHOW_FAILING = 5
"""Candidates missing the SLO shown below those meeting it (the closest first)."""


def _num(x: float | None, digits: int = 1) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:,.{digits}f}" if abs(x) < 10_000 else f"{x:,.0f}"


def _ci(block: dict[str, Any]) -> str:
    lo, hi = block.get("p99_ci95") or (None, None)
    return f"{_num(block.get('p99'), 0)} ({_num(lo, 0)}-{_num(hi, 0)})" if lo is not None else _num(block.get("p99"))


def plan_table(answer: dict[str, Any]) -> Table:
    """One row per simulated candidate, best first; the caption names the prices used."""
    slo = ", ".join(f"{k}<={v:g}" for k, v in answer["slo"].items())
    w = answer["workload"]
    verdict = "feasible" if answer["feasible"] else "NO candidate meets the SLO"
    table = Table(title=f"plan: {answer['model']} at {w['qps']:g} req/s, SLO {slo} -> {verdict}",
                  title_justify="left")
    for col in ("device", "TP", "repl", "GPUs", "weights", "TTFT p99 (95% CI)", "TPOT p99 (95% CI)", "stable",
                "p_meet", "meets", "at live edge", "binding (headroom)", "max req/s at SLO (live edge)", "$/h",
                "$/M out tok", "$/M tok"):
        table.add_column(col, justify="left" if col in ("device", "weights", "binding (headroom)") else "right")
    shown = [c for c in answer["candidates"] if c["meets_slo"]]
    others = [c for c in answer["candidates"] if not c["meets_slo"]]
    shown += others[:SHOW_FAILING]
    for c in shown:
        table.add_row(c["device"], str(c["tp"]), str(c["replicas"]), str(c["gpus"]), c["weight_dtype"],
                      _ci(c["ttft_ms"]), _ci(c["tpot_ms"]), "yes" if c["stable"] else "NO",
                      _num(c["p_meet"], 2), "yes" if c["meets_slo"] else "no", _live_edge(c),
                      f"{c['binding']} ({100 * c['headroom']:+.0f}%)", _max_rates(c),
                      _num(c["usd_per_hour"], 2), _num(c["usd_per_million_output_tokens"], 2),
                      _num(c["usd_per_million_tokens"], 3))
    s = answer["search"]
    prices = "; ".join(f"{name} ${p['usd_per_gpu_hour']:.2f}/GPU-h ({_origin(p)})"
                       for name, p in answer["prices"].items())
    hidden = len(others) - SHOW_FAILING
    more = f"{hidden} more simulated candidates miss the SLO (see --json).  " if hidden > 0 else ""
    table.caption = (f"{more}{s['candidates']} candidates, {s['pruned']} pruned by bounds or cost, "
                     f"{s['simulated']} simulated x {s['replications']} replications.  Prices: {prices}.  "
                     "At live edge: the SLO were the live engine at the slow edge of the measured error band "
                     "(`latsim predict`'s; the calibrated H200 and the H100 at TP=1 only, - elsewhere); in brackets "
                     "after the highest rate meeting the SLO, the highest meeting it there too (loads to 0.95 of "
                     "capacity)")
    table.caption_justify = "left"
    return table


def _live_edge(candidate: dict[str, Any]) -> str:
    """Whether the SLO holds with the live engine at the error band's slow edge (``-``: no band)."""
    meets = (candidate.get("meets_slo_at_live_edge") or {}).get("meets")
    return "-" if meets is None else ("yes" if meets else "no")


def _max_rates(candidate: dict[str, Any]) -> str:
    """The highest rate meeting the SLO, and in brackets the highest at the live edge when searched."""
    live = candidate.get("max_rps_at_slo_live_edge")
    plain = _num(candidate["max_rps_at_slo"])
    return plain if live is None else f"{plain} ({_num(live)})"


def _origin(price: dict[str, Any]) -> str:
    if price["origin"] == "user":
        return "--price"
    if price["origin"] == "catalog":
        return "catalog estimate"
    return f"list {price['as_of']}"
