"""``latsim predict --surrogate``'s printing: the surrogate's answer, or why the simulator answers."""

from __future__ import annotations

import json
import sys

from latsim.cli.app import out
from latsim.config import Settings
from latsim.workload.trace import RequestTrace


def check_surrogate_flags(out_dir: object, slo: object) -> None:
    """Refuse what only a simulation can give (per-request records, goodput against an SLO)."""
    from latsim.cli.app import UserError

    if out_dir is not None:
        raise UserError("--out writes per-request records, which the surrogate does not have; "
                        "drop --surrogate or --out")
    if slo is not None:
        raise UserError("--slo-ttft-ms/--slo-tpot-ms need per-request latencies, which the surrogate does not "
                        "have; drop --surrogate or the SLO")


def surrogate_or_reasons(settings: Settings, workload: RequestTrace, as_json: bool) -> dict | None:
    """Print the surrogate's answer and return ``None``; outside its domain say why on stderr
    and return the ``surrogate`` block the simulator's answer carries."""
    from latsim.predict.answer import answer
    from latsim.predict.surrogate import load_surrogate
    from latsim.report.output import json_default, json_safe
    from latsim.report.tables import latency_table

    summary, reasons = answer(settings, workload, load_surrogate())
    if summary is None:
        print(f"surrogate: outside its training domain ({'; '.join(reasons)}); the simulator answers",
              file=sys.stderr)  # one line, however long (a console would wrap it)
        return {"in_domain": False, "reasons": reasons}
    if as_json:
        print(json.dumps(json_safe(summary), allow_nan=False, default=json_default))
        return None
    out.print(latency_table(summary))
    verdict = "stable" if summary["stable"] else "unstable"
    out.print(f"surrogate: {verdict} (p={summary['surrogate']['stable_probability']:.2f}), "
              f"throughput {summary['throughput_rps']:.2f} req/s of {summary['offered_rps']:.2f} offered")
    return None
