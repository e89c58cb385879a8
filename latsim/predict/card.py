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
             f"requests each, {card['design']}; {_pct(card['stable_share'])} stable"
             + (f"; and, training only (never held out nor scored), {card['train_only']['size']} configurations of "
                f"{card['train_only']['design']}" if "train_only" in card else ""),
             f"- trees per target: {card['trees']['n_estimators']}, depth {card['trees']['max_depth']}, "
             f"learning rate {card['trees'].get('learning_rate', 0.1)}, at least "
             f"{card['trees'].get('min_child_weight', 1)} rows per leaf"
             + (f", {card['trees']['objective'].replace('_', ' ')} loss" if "objective" in card["trees"] else "")
             + "".join(f"; {target}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in settings.items())
                       for target, settings in card.get("target_trees", {}).items())
             + "; each latency learned as its log-ratio to the "
             "configuration's physics at its load (latsim.predict.surrogate.baseline_ms), made non-decreasing in load "
             "on a grid of loads"
             + (f"; stability: {card['stability_trees']['n_estimators']} trees of depth "
                f"{card['stability_trees']['max_depth']}" if "stability_trees" in card else ""),
             "", "## Training domain", ""]
    domain = card["domain"]
    lines.append(f"- models: {', '.join(domain['models'])}")
    lines.append(f"- devices: {', '.join(domain['devices'])}")
    lines += [f"- {name}: {lo:.4g} .. {hi:.4g}" for name, (lo, hi) in domain["ranges"].items()]
    lines += ["", "## Held-out error against the simulator", "",
              "Median |pred/sim - 1| over all held-out configurations, P90 in brackets, then the median over "
              "the configurations the simulator found stable, then over those below 0.75 x the estimated "
              "(mean-value) capacity, then over those the surrogate predicts stable (its latencies are steady-state "
              "figures only there: where it predicts unstable they are those of a run of the training length, "
              "growing with the run's length, as the simulator's own are)."]
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
                 + (f"; {_pct(e[target]['median_light'])}" if "median_light" in e[target] else "")
                 + (f"; {_pct(e[target]['median_said_stable'])}" if "median_said_stable" in e[target] else "")
                 for e in card["held_out"].values()]
        if noise:
            n = noise[target]
            cells.append(f"{_pct(n['median'])} ({_pct(n['p90'])}); {_pct(n['median_stable'])}")
        lines.append(f"| {target} | " + " | ".join(cells) + " |")
    cells = [f"{_pct(e['stable']['accuracy'])} / {_pct(e['stable']['accuracy_away_from_boundary'])}"
             + (f" / {_pct(e['stable']['accuracy_away_from_saturated_boundary'])}"
                if "accuracy_away_from_saturated_boundary" in e["stable"] else "")
             for e in card["held_out"].values()]
    if noise:
        cells.append(f"{_pct(noise['stable_agreement'])} agree")
    lines.append("| stable: accuracy all / away from boundary (estimated capacity / saturated capacity) | "
                 + " | ".join(cells) + " |")
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


README_BEGIN = "<!-- surrogate card: written by python -m latsim.predict.card -->"
README_END = "<!-- end of surrogate card -->"
_README_ROWS = (("TTFT P50 / P99", "ttft_ms_p50", "ttft_ms_p99"), ("TPOT P50 / P99", "tpot_ms_p50", "tpot_ms_p99"),
                ("E2E P50 / P99", "e2e_ms_p50", "e2e_ms_p99"))


def readme_block(card: dict) -> str:
    """The README's summary of ``card``: held-out medians (all configurations; stable ones in
    brackets), the noise floor, stability, and the live comparison."""
    splits = list(card["held_out"])
    noise = card.get("noise")
    head = "| target | " + " | ".join(_SPLIT_TITLES[s] for s in splits) + (" | run-to-run noise |" if noise else " |")
    lines = [README_BEGIN,
             f"Held-out error against the simulator ({card['sample_size']} configurations of "
             f"{card['num_requests_per_configuration']} requests; median |pred/sim - 1| over every held-out "
             "configuration; in brackets over the ones the simulator found stable, over those below 0.75 x the "
             "estimated (mean-value) capacity and over those the surrogate predicts stable (where its latencies "
             "are steady-state figures); P90s in `latsim/data/surrogate/CARD.md`):", "",
             head, "|---|" + "---|" * (len(splits) + bool(noise))]

    def cell(errors: dict, target: str) -> str:
        more = "".join(f"; {_pct(errors[target][k])}" for k in ("median_light", "median_said_stable")
                       if k in errors[target])
        return f"{_pct(errors[target]['median'])} ({_pct(errors[target]['median_stable'])}{more})"

    for title, p50, p99 in _README_ROWS:
        cells = [f"{cell(card['held_out'][s], p50)} / {cell(card['held_out'][s], p99)}" for s in splits]
        if noise:
            cells.append(f"{cell(noise, p50)} / {cell(noise, p99)}")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    cells = [cell(card["held_out"][s], "throughput_rps") for s in splits] + ([cell(noise, "throughput_rps")]
                                                                             if noise else [])
    lines.append("| throughput | " + " | ".join(cells) + " |")
    cells = [f"{_pct(card['held_out'][s]['stable']['accuracy'])} / "
             f"{_pct(card['held_out'][s]['stable']['accuracy_away_from_boundary'])}" for s in splits]
    if noise:
        cells.append(f"{_pct(noise['stable_agreement'])} agree")
    lines.append("| stable right (all / load outside 0.75-1.25 x capacity) | " + " | ".join(cells) + " |")
    shares = [card["held_out"][s]["stable"].get("accuracy_away_from_saturated_boundary") for s in splits]
    if all(x is not None for x in shares):
        lines.append("| ... outside 0.75-1.25 x the saturated capacity | " + " | ".join(_pct(x) for x in shares)
                     + (" | |" if noise else " |"))
    live = card.get("live")
    if live:
        parts = [f"{metric.replace('_ms_', ' ').upper()} {_pct(err['median'])} (simulator "
                 f"{_pct(live['simulator'][metric]['median'])})" for metric, err in live["surrogate"].items()]
        lines += ["", f"Against the {live['runs']} live Poisson levels of `{live['root']}` (median |pred/live - 1|): "
                  + ", ".join(parts) + "."]
    return "\n".join([*lines, README_END])


def replace_readme_block(text: str, card: dict) -> str:
    """``text`` with the block between :data:`README_BEGIN` and :data:`README_END` rewritten."""
    start, end = text.find(README_BEGIN), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no {README_BEGIN!r} ... {README_END!r} block")
    return text[:start] + readme_block(card) + text[end + len(README_END):]


def main(argv: list[str] | None = None) -> None:
    """``python -m latsim.predict.card FOLDER [--readme README.md]``: rewrite FOLDER's CARD.md
    (and the README's block) from FOLDER/surrogate.json."""
    import argparse
    import json
    from pathlib import Path

    from latsim.atomic import atomic_write_text

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0] if main.__doc__ else None)
    parser.add_argument("folder")
    parser.add_argument("--readme", default=None)
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    card = json.loads((folder / "surrogate.json").read_text())["card"]
    atomic_write_text(folder / "CARD.md", write_card_markdown(card))
    if args.readme:
        path = Path(args.readme)
        atomic_write_text(path, replace_readme_block(path.read_text(), card))


if __name__ == "__main__":
    main()
