"""How much memory a simulation needs at least, checked before it starts.

A simulation holds one request object per request, the trace's arrays and, at the end, the
per-request records.  :func:`bytes_per_request` sums what those take for one request, measured
on the objects themselves (``sys.getsizeof`` of a request and of the floats it stores); the
real footprint is larger (the scheduler's queues, the conversion to records), so this is a
lower bound.  :func:`check_fits_in_memory` refuses a workload whose lower bound exceeds the
memory this machine has available, before minutes are spent filling it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from latsim.sim.request import Req

TRACE_COLUMNS = 5  # arrival, input, output, prefix group and prefix tokens: 8-byte numbers each
RECORD_COLUMNS = 11  # latsim.metrics.per_request columns: 8-byte numbers or object pointers each
TIMES_SET = 5  # arrival, first scheduled, first token, last token and finish: a float object each


def bytes_per_request() -> int:
    """A lower bound of the bytes one request occupies while it is simulated and recorded."""
    req = Req(0, 0.0, 1, 1)
    pointer = 8  # the request list's reference to it
    return (sys.getsizeof(req) + TIMES_SET * sys.getsizeof(0.5) + pointer
            + 8 * TRACE_COLUMNS + 8 * RECORD_COLUMNS)


def available_bytes() -> int | None:
    """Memory this machine can give without swapping (``MemAvailable``), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits_in_memory(num_requests: int, available: int | None = None) -> None:
    """ValueError when ``num_requests`` need more than ``available`` bytes (default: this
    machine's :func:`available_bytes`; unknown: no check), naming the largest count that fits."""
    available = available_bytes() if available is None else available
    if available is None:
        return
    per_request = bytes_per_request()
    needed = num_requests * per_request
    if needed > available:
        raise ValueError(
            f"{num_requests} requests need at least {needed / 2**30:.1f} GiB ({per_request} bytes each) but "
            f"this machine has {available / 2**30:.1f} GiB available, room for at most "
            f"{available // per_request}; give fewer --num-requests or a shorter trace")
