"""``plan --surrogate``: the surrogate drops candidates far off the SLO; the simulator confirms the rest."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from latsim.config import Settings
from latsim.plan.screen import MARGIN, _reason
from latsim.plan.search import Options, Space
from latsim.plan.search import plan as search
from latsim.plan.slo import parse_slo

BASE = Settings(model="llama-3.1-8b", qps=4.0, input_len=256, output_len=64, num_requests=100)
SPACE = Space(devices=("h100", "l40s"), tps=(1,), replicas=(1,), weight_dtypes=("bf16",),
              engine_knobs=((None, None),))


def _row(**kw) -> pd.Series:
    base = {"in_domain": True, "stable": True, "stable_probability": 0.9,
            **{f"{m}_ms_{q}": 10.0 for m in ("ttft", "tpot", "e2e") for q in ("p50", "p90", "p99")}}
    return pd.Series({**base, **kw})


def test_a_candidate_is_dropped_only_far_off_the_slo_inside_the_domain() -> None:
    slo = parse_slo("tpot_p99_ms=8")
    assert _reason(_row(tpot_ms_p99=8.0 * MARGIN), slo) is None  # within the margin: the simulator decides
    assert "tpot_p99_ms" in (_reason(_row(tpot_ms_p99=8.0 * MARGIN * 1.01), slo) or "")
    assert _reason(_row(tpot_ms_p99=1e6, in_domain=False), slo) is None  # outside the domain: simulate
    assert "unstable" in (_reason(_row(stable=False), slo) or "")
    assert _reason(_row(), parse_slo("itl_p99_ms=1")) is None  # a statistic it does not predict


def test_screened_plan_keeps_the_answer_and_says_what_it_dropped() -> None:
    slo = parse_slo("ttft_p99_ms=2000,tpot_p99_ms=60")
    plain = search(BASE, SPACE, slo, Options(replications=2))
    screened = search(BASE, SPACE, slo, Options(replications=2, surrogate=True))
    assert screened["search"]["surrogate_screen"] is True
    assert (screened["best"]["device"], screened["feasible"]) == (plain["best"]["device"], plain["feasible"])
    strict = search(BASE, SPACE, parse_slo("tpot_p99_ms=0.5"), Options(replications=2, surrogate=True))
    assert not strict["feasible"] and strict["search"]["simulated"] == 0
    assert all(p["reason"].startswith("surrogate:") for p in strict["pruned"])


def test_a_kv_layout_the_surrogate_never_saw_is_left_to_the_simulator() -> None:
    """Gemma 3's sliding windows: the surrogate's features cannot tell its KV cache from an
    unwindowed one, so even a hopeless SLO leaves it to the simulator (the 8B is dropped)."""
    from latsim.plan.screen import screen

    slo = parse_slo("tpot_p99_ms=0.5")
    reasons = screen([BASE, replace(BASE, model="gemma-3-27b")], BASE, slo)
    assert reasons[0] is not None and reasons[0].startswith("surrogate:")
    assert reasons[1] is None
