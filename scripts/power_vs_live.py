"""The power model's decode cap against the SM clock of the live runs (``data/power/h200``).

    python scripts/power_vs_live.py [data/power/h200] --decode-trace RUN=SMI [--runs REGEX]

For every level of every live run with an ``nvidia-smi`` series beside it (``runs.json``), two
shares of the way to the capped clock (``scripts/power_decode.py``'s measure), averaged over the
level's wall time:

- ``measured``: ``(f_full / f - 1) / (f_full / f_cap - 1)`` per sample of the series, idle
  samples included (f_full and f_cap: the power probe's, ``power_decode.probe_clocks``);
- ``decode_model``: the level replayed (``latsim validate``'s replay, priced by ``--profile``),
  every step weighted by its price and its decoders' share on the ramp fitted to the ``--decode-trace`` runs
  (``power_decode.fit_ramp``, as ``fit_power.py --decode-trace`` fits it; decode runs at their
  first step's rate), over the level's duration.

- ``state_model``: the same replay's whole power model (``--profile``'s ``power.json``, its
  ``decode_cap`` included): at every step with prompt work the share the
  tensor-rate state gives it, held from the previous such step to this one's end (the state the
  model keeps between them), over the level's duration.  Only with a ``decode_cap``.

The decode cap covers only decoding's draw: levels whose prompts are long (prefill at the cap,
the budget's part of the model) read above it by design; short-prompt levels should agree.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from power_decode import (  # type: ignore[import-not-found]  # scripts/
    clock_share,
    decode_points,
    fit_ramp,
    probe_clocks,
    ramp,
    run_and_series,
)
from power_summary import read_smi, series_runs, window  # type: ignore[import-not-found]  # scripts/ is on the path


class ShareTally:
    """A cost model that prices like ``inner`` and sums each step's price x decode-cap share."""

    def __init__(self, inner: Any, ramp: tuple[float, float]) -> None:
        self._inner = inner
        self._ramp = ramp
        self.busy_s = 0.0
        self.capped_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _share(self, shape: Any) -> float:
        if shape.decode_seqs <= 0:
            return 0.0
        return float(ramp(np.array([self._inner.decode_tflops(shape)]), *self._ramp)[0])

    def step_time(self, shape: Any) -> float:
        price = float(self._inner.step_time(shape))
        self.busy_s += price
        self.capped_s += price * self._share(shape)
        return price

    def decode_run(self, seqs: int, kv_tokens: int, steps: int, kv_sq: int = 0) -> Any:
        from latsim.costmodel.batch import BatchShape

        prices = self._inner.decode_run(seqs, kv_tokens, steps, kv_sq)
        total = float(np.sum(prices))
        self.busy_s += total
        self.capped_s += total * self._share(BatchShape(decode_seqs=seqs, decode_kv_tokens=kv_tokens))
        return prices


class StateTally:
    """While open, sums the share :class:`~latsim.costmodel.power.PowerClock` gives each step with
    prompt work, times the span since the previous one (``share_s``): the model's clock state
    integrated over the replay (one replica).  It wraps ``PowerClock._rate_share`` for the
    duration (a diagnostic's hook; the simulator itself keeps no such tally)."""

    def __init__(self) -> None:
        self.share_s = 0.0

    def __enter__(self) -> StateTally:
        from latsim.costmodel.power import PowerClock

        self._original = original = PowerClock._rate_share
        tally = self

        def counted(clock: Any, cap: Any, cost: Any, shape: Any, start: float, dur: float, heavy: bool) -> float:
            since = clock.rate_at if clock.rate_at > -np.inf else start
            share = float(original(clock, cap, cost, shape, start, dur, heavy))
            tally.share_s += share * (start + dur - since)
            return share

        PowerClock._rate_share = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        from latsim.costmodel.power import PowerClock

        PowerClock._rate_share = self._original  # type: ignore[method-assign]


def level_shares(run_dir: Path, smi: pd.DataFrame, device: str, clocks: tuple[float, float],
                 ramp_terms: tuple[float, float], profile: Path, state: bool = False) -> list[dict[str, Any]]:
    """One row per level of ``run_dir``: measured and modelled decode-cap shares (module note), the
    level replayed once with ``profile``'s cost model; ``state``: with the ``state_model`` column."""
    from latsim.measure.records import load_run
    from latsim.sim.simulate import simulate
    from latsim.validate.compare import profile_cost_model, replay_deployment

    rows = []
    for level in sorted(p for p in run_dir.iterdir() if (p / "meta.json").exists()):
        meta = json.loads((level / "meta.json").read_text())
        cut = window(smi, meta["start_time"], meta["duration_s"])
        measured = float(clock_share(cut["sm"], clocks).clip(lower=0.0).mean())
        run = load_run(level)
        deployment = replay_deployment(run.meta, device)
        tally = ShareTally(profile_cost_model(deployment, profile), ramp_terms)
        with StateTally() as states:
            simulate(deployment, run.to_trace(), seed=0, cost_model=tally)
        duration = float(meta["duration_s"])
        rows.append({"run": run_dir.name, "level": level.name, "samples": len(cut),
                     "measured": round(measured, 3),
                     "decode_model": round(tally.capped_s / duration, 3),
                     "busy_model": round(tally.busy_s / duration, 2),
                     **({"state_model": round(states.share_s / duration, 3)} if state else {})})
    return rows


def main() -> None:
    from latsim.costmodel.power import load_power_cap

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, nargs="?", default=Path("data/power/h200"))
    ap.add_argument("--device", default="h200")
    ap.add_argument("--profile", type=Path, default=Path("latsim/data/calibration/h200"))
    ap.add_argument("--runs", default=".", help="only runs whose folder matches this regular expression")
    ap.add_argument("--decode-trace", action="append", required=True, metavar="RUN=SMI",
                    help="a device_trace.py run of stamped decode scenarios and its nvidia-smi series (repeatable)")
    args = ap.parse_args()
    cap = load_power_cap(args.profile)
    if cap is None:
        ap.error(f"--profile {args.profile}: no power.json there (scripts/fit_power.py writes one)")
    with gzip.open(args.folder / "power_probe.json.gz", "rt") as f:
        clocks = probe_clocks(json.load(f), cap.heavy_tokens)
    pairs = [run_and_series(text) for text in args.decode_trace]
    points = pd.concat([decode_points(run, smi, args.profile, clocks) for run, smi in pairs])
    fit = fit_ramp(points[points["gemm_class"] == "bf16"])
    ramp_terms = (fit["decode_onset_tflops"], fit["decode_full_tflops"])
    has_state = cap.has_decode_cap
    print(f"ramp {ramp_terms[0]:.0f}-{ramp_terms[1]:.0f} TFLOP/s, clocks {clocks[0]:.0f} / {clocks[1]:.0f} MHz")
    rows = []
    for series, run in sorted(series_runs(json.loads((args.folder / "runs.json").read_text())), key=lambda kv: kv[1]):
        if not re.search(args.runs, run) or not Path(run).is_dir():
            continue
        rows += level_shares(Path(run), read_smi(args.folder / series), args.device, clocks, ramp_terms,
                             args.profile, has_state)
    pd.set_option("display.width", 200)
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
