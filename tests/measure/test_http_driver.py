"""The HTTP driver against the loopback test server, whose token schedule is known."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from latsim.measure.http_driver import HttpOptions, completions_url, run_http
from latsim.measure.loadgen import LoadSpec
from latsim.measure.records import load_run
from latsim.measure.testserver import ServerSchedule, StreamingTestServer
from latsim.workload.trace import RequestTrace

TOL_S = 0.010  # asyncio timers on a loaded 2-core machine: a few ms either way


def trace(n: int, gap_s: float = 0.0, inp: int = 16, out: int = 8) -> RequestTrace:
    return RequestTrace.from_arrays(np.arange(n) * gap_s, [inp] * n, [out] * n)


def test_ttft_and_itl_follow_the_schedule(tmp_path: Path) -> None:
    sch = ServerSchedule(first_token_s=0.040, token_interval_s=0.010)
    with StreamingTestServer(sch) as srv:
        run_http(srv.url, "m", trace(1), LoadSpec())  # warm both sides' cold code paths
        m = run_http(srv.url, "m", trace(5, 0.05, out=10), LoadSpec(request_timeout_s=5), tmp_path)
        body, writes, arrivals = srv.bodies[-1], srv.chunk_writes[1:], srv.arrivals[1:]  # [0]: the warm-up
    req = m.requests
    assert req["status"].tolist() == ["ok"] * 5
    assert req["output_tokens_received"].tolist() == [10] * 5
    assert req["input_tokens"].tolist() == [16] * 5  # the server's usage.prompt_tokens
    ttft = (req["first_token_s"] - req["sent_s"]).to_numpy()
    assert ttft.min() > 0.040 - 0.002  # never before the server's schedule
    # The client saw each chunk soon after the server wrote it (the server's own timers may run
    # late on a loaded machine; what is measured is what was written).
    # Each on its own clock origin: the client's chunk times from when it sent the request, the
    # server's writes from when the request arrived (after it was sent).
    order = np.argsort(req["sent_s"].to_numpy())
    written = np.array(writes) - np.array(arrivals)[:, None]  # requests in arrival order x chunks
    seen = np.array([req["chunk_times_s"].iloc[i] for i in order]) - req["sent_s"].to_numpy()[order, None]
    lag = seen - written
    assert lag.min() > 0.0 and np.median(lag) < TOL_S and lag.max() < 3 * TOL_S
    values, weights = m.itl_samples()
    assert len(values) == 45 and np.allclose(weights, 1)
    assert np.allclose(np.sort(values), np.sort(np.diff(written, axis=1).ravel()), atol=2 * TOL_S)
    assert body["max_tokens"] == body["min_tokens"] == 10 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert isinstance(body["prompt"], list) and len(body["prompt"]) == 16
    assert list(load_run(tmp_path).records()) == list(m.records())
    assert load_run(tmp_path).meta["endpoint"] == srv.url + "/v1/completions"


def test_multi_token_chunks_use_token_ids() -> None:
    sch = ServerSchedule(first_token_s=0.01, token_interval_s=0.02, tokens_per_chunk=2,
                         include_token_ids=True)
    with StreamingTestServer(sch) as srv:
        m = run_http(srv.url, "m", trace(1, out=6), LoadSpec(request_timeout_s=5))
    assert m.requests["chunk_tokens"][0] == (2, 2, 2)
    values, weights = m.itl_samples()
    assert weights.tolist() == [1.0, 2.0, 2.0]
    assert abs(values[1] - 0.010) < TOL_S / 2 and values[0] == 0.0


def test_stall_times_out_without_hanging() -> None:
    with StreamingTestServer(ServerSchedule(mode="stall", first_token_s=0.01)) as srv:
        t0 = time.perf_counter()
        m = run_http(srv.url, "m", trace(2, 0.01), LoadSpec(request_timeout_s=0.3))
        elapsed = time.perf_counter() - t0
    assert elapsed < 30.0  # a stalled stream would never end: any bound proves it was cut (loose: CI is loaded)
    assert m.requests["status"].tolist() == ["timeout", "timeout"]
    assert m.requests["output_tokens_received"].tolist() == [1, 1]
    assert "0.3 s" in m.requests["error"][0]


def test_run_deadline_stops_everything() -> None:
    with StreamingTestServer(ServerSchedule(mode="stall")) as srv:
        t0 = time.perf_counter()
        load = LoadSpec(request_timeout_s=60, deadline_s=0.4)
        m = run_http(srv.url, "m", trace(2, gap_s=5.0), load)
        elapsed = time.perf_counter() - t0
    assert elapsed < 30.0  # the stalled stream would run 60 s: the deadline cut it (loose: CI is loaded)
    assert m.requests["status"].tolist() == ["timeout", "error"]
    assert m.requests["error"].tolist() == ["run deadline reached", "not sent before the run deadline"]
    assert np.isnan(m.requests["sent_s"][1]) and len(m.to_trace()) == 1


@pytest.mark.parametrize(("mode", "message"), [
    ("error500", "HTTP 500: synthetic failure"),
    ("malformed", "malformed SSE data"),
    ("no_done", "stream ended before"),
])
def test_server_errors_become_error_records(mode: str, message: str) -> None:
    with StreamingTestServer(ServerSchedule(mode=mode, first_token_s=0.0, token_interval_s=0.0)) as srv:
        m = run_http(srv.url, "m", trace(2), LoadSpec(request_timeout_s=5))
    assert m.requests["status"].tolist() == ["error", "error"]
    assert all(message in e for e in m.requests["error"])


def test_connection_refused_is_an_error_record() -> None:
    with StreamingTestServer() as srv:
        url = srv.url
    m = run_http(url, "m", trace(1), LoadSpec(request_timeout_s=5))
    assert m.requests["status"][0] == "error" and m.requests["error"][0]


def test_concurrency_mode_caps_requests_in_flight() -> None:
    sch = ServerSchedule(first_token_s=0.02, token_interval_s=0.005)
    with StreamingTestServer(sch) as srv:
        m = run_http(srv.url, "m", trace(12, gap_s=10.0, out=4),
                     LoadSpec(mode="concurrency", concurrency=3, request_timeout_s=5))
    assert srv.max_in_flight == 3
    assert m.requests["status"].eq("ok").all()
    assert m.requests["arrival_s"].max() < 1.0  # the trace's 10 s gaps are ignored
    assert np.allclose(m.requests["arrival_s"], m.requests["sent_s"], atol=TOL_S)


def test_open_loop_cap_holds_requests_back() -> None:
    with StreamingTestServer(ServerSchedule(first_token_s=0.05)) as srv:
        m = run_http(srv.url, "m", trace(6, out=2), LoadSpec(mode="burst", concurrency=2))
    assert srv.max_in_flight == 2
    lag = (m.requests["sent_s"] - m.requests["arrival_s"]).to_numpy()
    assert lag[:2].max() < TOL_S and lag[4:].min() > 0.09


def test_open_loop_sends_on_schedule_regardless_of_completions() -> None:
    gaps = np.array([0.0, 0.03, 0.07, 0.08, 0.15, 0.20])
    tr = RequestTrace.from_arrays(gaps + 1.0, [8] * 6, [5] * 6)  # offsets are from the first
    with StreamingTestServer(ServerSchedule(first_token_s=0.1, token_interval_s=0.02)) as srv:
        m = run_http(srv.url, "m", tr, LoadSpec(request_timeout_s=5))
        seen = np.array(srv.arrivals)
    assert np.allclose(m.requests["arrival_s"], gaps)
    assert m.meta["send_lag_s"]["max"] < TOL_S  # the client sent each on time ...
    # ... and the server saw that: never early, typically on time (its own thread shares the
    # two cores with the client, so one late accept under load is tolerated up to 0.1 s)
    dev = (seen - seen[0]) - gaps
    assert dev.min() > -2 * TOL_S and np.median(np.abs(dev)) < 2 * TOL_S and dev.max() < 0.1
    assert srv.max_in_flight >= 4  # sent while earlier ones were still streaming


def test_text_prompt_and_extra_body() -> None:
    opt = HttpOptions(prompt="text", extra_body={"temperature": 0.0})
    with StreamingTestServer() as srv:
        run_http(srv.url + "/v1", "my-model", trace(1, inp=30), LoadSpec(), options=opt)
        body = srv.bodies[0]
    assert isinstance(body["prompt"], str) and len(body["prompt"].split()) == 30
    assert body["model"] == "my-model" and body["temperature"] == 0.0


def test_completions_url() -> None:
    assert completions_url("http://h:1") == "http://h:1/v1/completions"
    assert completions_url("http://h:1/v1/") == "http://h:1/v1/completions"
    assert completions_url("https://h/v1/completions") == "https://h/v1/completions"
    with pytest.raises(ValueError, match="must start with http"):
        completions_url("h:1")


def test_load_spec_validation() -> None:
    with pytest.raises(ValueError, match="mode='closed'"):
        LoadSpec(mode="closed")
    with pytest.raises(ValueError, match="needs concurrency"):
        LoadSpec(mode="concurrency")
    with pytest.raises(ValueError, match="request_timeout_s=0"):
        LoadSpec(request_timeout_s=0)


def test_runs_never_share_prompts_unless_asked_to() -> None:
    """Two runs against one server (whose prefix cache would serve the second from the first)."""
    with StreamingTestServer(ServerSchedule(first_token_s=0.001, token_interval_s=0.001)) as srv:
        first = run_http(srv.url, "m", trace(3, out=2), LoadSpec(request_timeout_s=5))
        second = run_http(srv.url, "m", trace(3, out=2), LoadSpec(request_timeout_s=5))
        run_id = first.meta["client"]["run_id"]
        again = run_http(srv.url, "m", trace(3, out=2), LoadSpec(request_timeout_s=5),
                         options=HttpOptions(run_id=run_id))
    prompts = [tuple(b["prompt"][:16]) for b in srv.bodies]
    assert len(set(prompts[:6])) == 6  # first and second: all distinct
    assert sorted(prompts[6:]) == sorted(prompts[:3])  # the same run_id replays the first run's prompts
    assert second.meta["client"]["run_id"] != run_id and "client_gc" in again.meta
