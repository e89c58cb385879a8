"""The front end's time per output ahead of a first token (``output_seq_s``): which requests a
first token waits behind, and what it adds to the records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from latsim.costmodel.host import HostOverhead
from latsim.sim.request import FINISHED, Req
from latsim.sim.simulate import outputs_ahead, records_frame


def req(idx: int, scheduled: float, first: float, finish: float, replica: int = 0) -> Req:
    r = Req(idx, arrival=scheduled, prompt=16, target=4)
    r.first_scheduled, r.first_token, r.finish, r.replica, r.state = scheduled, first, finish, replica, FINISHED
    return r


def test_a_first_token_waits_behind_the_requests_running_on_its_replica() -> None:
    reqs = [
        req(0, 0.0, 0.01, 0.50),            # running throughout
        req(1, 0.0, 0.01, 0.10),            # finished before request 3's first token
        req(2, 0.20, 0.21, 0.30),           # finishes in the step that carries 3's first token: counted
        req(3, 0.25, 0.30, 0.60),
        req(4, 0.26, 0.30, 0.60, replica=1),  # another replica's: never counted on replica 0
        req(5, 0.35, math.nan, math.nan),   # scheduled after 3's first token, never got one
    ]
    assert outputs_ahead(reqs).tolist() == [1.0, 1.0, 1.0, 2.0, 0.0, 0.0]


def test_the_term_delays_first_tokens_only_by_the_outputs_ahead() -> None:
    reqs = [req(0, 0.0, 0.01, 0.50), req(1, 0.0, 0.01, 0.10), req(2, 0.20, 0.21, 0.30), req(3, 0.25, 0.30, 0.60)]
    plain = records_frame(reqs, frontend_s=0.002)
    lagged = records_frame(reqs, frontend_s=0.002, output_seq_s=1e-4)
    assert np.allclose(lagged["first_token_s"] - plain["first_token_s"], 1e-4 * outputs_ahead(reqs))
    assert lagged["finish_s"].equals(plain["finish_s"])
    assert (plain["first_token_s"] == [r.first_token + 0.002 for r in reqs]).all()


def test_the_term_is_cpu_time_and_scales_with_the_host() -> None:
    host = HostOverhead(step_s=1e-3, seq_s=1e-5, frontend_s=3e-3, output_seq_s=4e-5)
    assert host.at_speed(0.5).output_seq_s == pytest.approx(8e-5)
    with pytest.raises(ValueError, match="output_seq_s"):
        HostOverhead(step_s=1e-3, seq_s=1e-5, frontend_s=3e-3, output_seq_s=-1e-6)
