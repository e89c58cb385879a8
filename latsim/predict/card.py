"""The surrogate's card as markdown: what it was trained on and how far to trust it."""

from __future__ import annotations

from latsim.predict.recipe import TARGETS

_SPLIT_TITLES = {"configuration": "whole configurations (5-fold)", "model_family": "whole model family left out",
                 "gpu": "whole GPU left out"}


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def write_card_markdown(card: dict) -> str:
    """Render ``card`` (the ``card`` entry of ``surrogate.json``) as markdown."""
    lines = ["# latsim surrogate card", "",
             f"- trained: {card['trained_utc']} on simulator commit `{card['simulator_commit']}`",
             f"- sample: {card['sample_size']} simulated configurations of {card['num_requests_per_configuration']} "
             f"requests each, {card['design']}; {_pct(card['stable_share'])} stable",
             f"- trees per target: {card['trees']['n_estimators']}, depth {card['trees']['max_depth']}, "
             f"learning rate {card['trees'].get('learning_rate', 0.1)}; each latency learned as its log-ratio to the "
             "configuration's physics at its load (latsim.predict.surrogate.baseline_ms), made non-decreasing in load "
             "on a grid of loads",
             "", "## Training domain", ""]
    domain = card["domain"]
    lines.append(f"- models: {', '.join(domain['models'])}")
    lines.append(f"- devices: {', '.join(domain['devices'])}")
    lines += [f"- {name}: {lo:.4g} .. {hi:.4g}" for name, (lo, hi) in domain["ranges"].items()]
    lines += ["", "## Held-out error against the simulator", "",
              "Median |pred/sim - 1| over all held-out configurations, P90 in brackets, then the median over "
              "the configurations the simulator found stable."]
    noise = card.get("noise")
    if noise:
        lines += ["", f"The last column is the simulator's own run-to-run noise at this run length: the same "
                  f"{noise['pairs']} configurations simulated again with other seeds, |run/repeat - 1| in the same "
                  f"format (no surrogate can be scored below it against one run); the two runs' stability "
                  f"verdicts agree on {_pct(noise['stable_agreement'])} of them."]
    lines += ["", "| target | " + " | ".join(_SPLIT_TITLES[s] for s in card["held_out"])
              + (" | run-to-run noise |" if noise else " |"),
              "|---|" + "---|" * (len(card["held_out"]) + bool(noise))]
    for target in TARGETS:
        cells = [f"{_pct(e[target]['median'])} ({_pct(e[target]['p90'])}); {_pct(e[target]['median_stable'])}"
                 for e in card["held_out"].values()]
        if noise:
            n = noise[target]
            cells.append(f"{_pct(n['median'])} ({_pct(n['p90'])}); {_pct(n['median_stable'])}")
        lines.append(f"| {target} | " + " | ".join(cells) + " |")
    cells = [f"{_pct(e['stable']['accuracy'])} / {_pct(e['stable']['accuracy_away_from_boundary'])}"
             for e in card["held_out"].values()]
    if noise:
        cells.append(f"{_pct(noise['stable_agreement'])} agree")
    lines.append("| stable: accuracy all / away from boundary | " + " | ".join(cells) + " |")
    live = card.get("live")
    if live:
        lines += ["", f"## Against the live vLLM runs ({live['runs']} Poisson levels under `{live['root']}`, "
                  f"{live['surrogate_in_domain']} inside the domain)", "",
                  "| metric | surrogate median (P90) | simulator median (P90) |", "|---|---|---|"]
        for metric, err in live["surrogate"].items():
            sim = live["simulator"][metric]
            lines.append(f"| {metric} | {_pct(err['median'])} ({_pct(err['p90'])}) | "
                         f"{_pct(sim['median'])} ({_pct(sim['p90'])}) |")
    return "\n".join(lines) + "\n"
