"""``latsim plan --surrogate``: rank every candidate with the fitted surrogate, simulate only those
it predicts may meet the SLO.

The surrogate (:func:`latsim.predict.load_surrogate`) answers each candidate in about a
millisecond (its cost models are built once per model, GPU and TP).  A candidate is dropped
without simulation when the surrogate, inside its training domain, predicts it unstable or
predicts a targeted statistic above its limit by more than
:data:`MARGIN` (the surrogate's held-out P99 error is 7-12 % at the median but 30-60 % at its
90th percentile, near capacity; ``latsim/data/surrogate/CARD.md``: a narrower margin would drop
deployments that meet the SLO).  Candidates outside the domain, and targets the surrogate does not
predict (ITL, queueing, means, P95), are left to the simulator, which confirms every candidate
kept: the answer is always a simulated one.
"""

from __future__ import annotations

import pandas as pd

from latsim.config import Settings
from latsim.plan.slo import PlanSLO

MARGIN = 1.5
"""A candidate is dropped only when a predicted statistic exceeds its limit by this factor."""
PREDICTED = {(m, q) for m in ("ttft", "tpot", "e2e") for q in ("p50", "p90", "p99")}


def screen(candidates: list[Settings], base: Settings, slo: PlanSLO) -> list[str | None]:
    """Per candidate, the reason the surrogate drops it, or ``None`` to simulate it."""
    from latsim.predict.answer import config_row
    from latsim.predict.surrogate import load_surrogate
    from latsim.scenario import build_trace

    trace, surrogate = build_trace(base), load_surrogate()
    reasons: list[str | None] = []
    for c in candidates:  # each candidate is ``base`` with its deployment settings
        try:
            row, unlike_training = config_row(c, trace)
            predicted = surrogate.predict(row)
        except ValueError:  # e.g. a deployment the surrogate's features cannot plan: the simulator decides
            reasons.append(None)
            continue
        if unlike_training:  # settings or a KV layout the surrogate never saw (predict says which)
            reasons.append(None)
            continue
        reasons.append(_reason(predicted.iloc[0], slo))
    return reasons


def _reason(row: pd.Series, slo: PlanSLO) -> str | None:
    if not bool(row["in_domain"]):
        return None
    if not bool(row["stable"]):
        return f"surrogate: predicted unstable (p={float(row['stable_probability']):.2f})"
    for t in slo.targets:
        if (t.metric, t.stat) in PREDICTED:
            value = float(row[f"{t.metric}_ms_{t.stat}"])
            if value > MARGIN * t.limit_ms:
                return f"surrogate: predicted {t.name} {value:.0f} ms > {MARGIN:g} x the {t.limit_ms:g} ms limit"
    return None
