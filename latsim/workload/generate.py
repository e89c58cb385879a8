"""Synthetic request streams: an arrival process crossed with two length distributions.

Randomness design: ``synthesize`` spawns three independent child generators from the ``rng``
it is given (arrivals, input lengths, output lengths, in that order), so the same seed gives
the same trace in any process, and changing only ``qps`` or the arrival process leaves the
drawn lengths unchanged (common random numbers across a qps sweep).  Each call advances the
parent's spawn counter, so two calls on one generator give two different traces.
"""

from __future__ import annotations

import numpy as np

from latsim.workload.arrivals import ArrivalProcess, check_rate, parse_arrival
from latsim.workload.lengths import LengthDistribution, parse_lengths
from latsim.workload.trace import RequestTrace


def synthesize(
    qps: float,
    num_requests: int,
    arrival: str | ArrivalProcess,
    input_dist: str | int | LengthDistribution,
    output_dist: str | int | LengthDistribution,
    rng: np.random.Generator,
) -> RequestTrace:
    """A trace of ``num_requests`` requests arriving at mean rate ``qps`` (first at t = 0).

    ``arrival`` is an arrival spec (``"poisson"``, ``"gamma:cv=2"``, ...) or process;
    ``input_dist`` / ``output_dist`` are length specs (``"lognormal:median=600,sigma=0.8"``,
    ``200``, ...) or distributions.  ``qps`` must be a finite number > 0 even for ``burst``,
    which ignores its value.  ``rng`` must be a ``numpy.random.Generator`` created from a
    seed (``np.random.default_rng(seed)``), as child streams are spawned from it.
    """
    check_rate(qps, num_requests)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    process = parse_arrival(arrival)
    inputs, outputs = parse_lengths(input_dist), parse_lengths(output_dist)
    arrival_rng, input_rng, output_rng = rng.spawn(3)
    return RequestTrace.from_arrays(
        process.sample(qps, num_requests, arrival_rng),
        inputs.sample(num_requests, input_rng),
        outputs.sample(num_requests, output_rng),
    )
