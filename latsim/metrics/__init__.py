"""Latency and throughput metrics computed from the simulator's per-request records."""

from latsim.metrics.per_request import RECORD_COLUMNS, STATUSES, add_latencies, check_records
from latsim.metrics.stats import bootstrap_ci, bootstrap_replicates, describe, weighted_percentiles
from latsim.metrics.summary import SLO, littles_law, summarize

__all__ = [
    "RECORD_COLUMNS",
    "SLO",
    "STATUSES",
    "add_latencies",
    "bootstrap_ci",
    "bootstrap_replicates",
    "check_records",
    "describe",
    "littles_law",
    "summarize",
    "weighted_percentiles",
]
