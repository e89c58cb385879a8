"""scripts/error_band.py: the held-out check of bands built without the latest levels."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.script_module import load_script

script = load_script(Path("error_band.py"))


def _levels(start: str, errors: list[float], config: str = "m-mix") -> pd.DataFrame:
    return pd.DataFrame([{"run": f"v/{start}/{config}-{k}/f0.25", "level": "f0.25", "metric": "tpot_ms",
                          "stat": "p50", "error": e, "host_ratio": 0.5} for k, e in enumerate(errors)])


def test_holdout_counts_the_matching_levels_inside_the_others_band() -> None:
    early = pd.concat([_levels("s1", [0.0, 0.02, 0.04, 0.06], "a-mix"), _levels("s1", [0.01, 0.03, 0.05], "b-mix")])
    late = _levels("s9", [0.03, 0.5])
    text = script.holdout_check(pd.concat([early, late], ignore_index=True), "/s9/", "h200")
    assert text == "tpot p50 1/2"  # 0.03 inside the early band, 0.5 far outside


def test_holdout_must_split_the_levels() -> None:
    with pytest.raises(SystemExit, match="must match some levels and leave others"):
        script.holdout_check(_levels("s1", [0.0, 0.1]), "/nowhere/", "h200")
