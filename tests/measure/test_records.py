"""The run-directory format: round trips, clear errors, and the simulator-facing views."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from latsim.measure.measurement import SIM_COLUMNS, Measurement, chunk_itl
from latsim.measure.records import FORMAT, RequestRecord, load_run, write_run
from latsim.metrics.per_request import check_records


def ok_record(rid: str, sent: float, ttft: float = 0.05, gap: float = 0.01, n: int = 4,
              **kw: object) -> RequestRecord:
    times = tuple(sent + ttft + gap * j for j in range(n))
    fields: dict = dict(request_id=rid, arrival_s=sent, sent_s=sent, input_tokens=100, output_tokens=n,
                        output_tokens_received=n, first_token_s=times[0], chunk_times_s=times,
                        chunk_tokens=(1,) * n, finish_s=times[-1], status="ok", error=None)
    fields.update(kw)
    return RequestRecord(**fields)


def sample_records() -> list[RequestRecord]:
    return [
        ok_record("a", 0.0),
        ok_record("b", 0.30, arrival_s=0.25, prefix_group=3, prefix_tokens=32),
        ok_record("c", 0.10, chunk_tokens=None),
        RequestRecord("d", 0.40, 0.40, 50, 8, 0, None, (), None, 0.45, "error", "HTTP 500: boom"),
        RequestRecord("e", 0.50, 0.50, 50, 8, 2, 0.6, (0.6, 0.7), (1, 1), 1.5, "timeout", "no reply"),
        RequestRecord("f", 9.00, None, 50, 8, 0, None, (), None, 2.0, "error", "not sent"),
    ]


def test_round_trip(tmp_path: Path) -> None:
    records = sample_records()
    write_run(tmp_path / "run", records, {"driver": "test", "load": {"mode": "open"}})
    m = load_run(tmp_path / "run")
    assert list(m.records()) == records
    assert m.meta["format"] == FORMAT and m.meta["num_requests"] == 6 and m.meta["driver"] == "test"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["meta.json", "requests.jsonl.gz"]


def test_write_rejects_invalid_record(tmp_path: Path) -> None:
    bad = ok_record("a", 0.0, status="done")
    with pytest.raises(ValueError, match="status 'done'"):
        write_run(tmp_path, [bad], {"driver": "test"})


def test_engine_times_are_optional_on_disk_and_must_be_finite(tmp_path: Path) -> None:
    timed = ok_record("g", 0.20, engine_queued_s=0.2012, engine_scheduled_s=0.215, engine_first_token_s=0.248,
                      engine_last_token_s=0.279)
    write_run(tmp_path / "timed", [timed], {"driver": "test"})
    assert list(load_run(tmp_path / "timed").records()) == [timed]
    write_run(tmp_path / "run", [ok_record("a", 0.0)], {"driver": "test"})
    with gzip.open(tmp_path / "run" / "requests.jsonl.gz", "rt") as fh:
        assert "engine_queued_s" not in json.loads(fh.readline())
    with pytest.raises(ValueError, match="engine_scheduled_s=nan must be a finite number or null"):
        ok_record("a", 0.0, engine_scheduled_s=float("nan")).validate()


def _write_lines(run: Path, lines: list[str], meta: dict | None = None) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "requests.jsonl.gz").write_bytes(gzip.compress("\n".join(lines).encode() + b"\n"))
    meta = {"format": FORMAT, "driver": "test"} if meta is None else meta
    (run / "meta.json").write_text(json.dumps(meta))


def _good_line(rid: str = "a") -> dict:
    return ok_record(rid, 0.0).to_json()


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.pop("finish_s"), r"requests.jsonl.gz:2: missing key\(s\) \['finish_s'\]"),
    (lambda d: d.update(status="weird"), r"requests.jsonl.gz:2: status 'weird'"),
    (lambda d: d.update(input_tokens="many"), r"requests.jsonl.gz:2: input_tokens='many'"),
    (lambda d: d.update(chunk_tokens=[1]), r"requests.jsonl.gz:2: chunk_tokens has 1 entries"),
    (lambda d: d.update(chunk_times_s=[0.3, 0.2, 0.1, 0.0]), r"requests.jsonl.gz:2: .*non-decreasing"),
    (lambda d: d.update(request_id="a"), r"requests.jsonl.gz:2: duplicate request_id 'a'"),
    (lambda d: d.update(first_token_s=None), r"requests.jsonl.gz:2: an 'ok' record needs"),
])
def test_corrupt_record_names_file_and_line(tmp_path: Path, mutate, message: str) -> None:
    second = _good_line("b")
    mutate(second)
    _write_lines(tmp_path, [json.dumps(_good_line("a")), json.dumps(second)])
    with pytest.raises(ValueError, match=message):
        load_run(tmp_path)


def test_not_json_line(tmp_path: Path) -> None:
    _write_lines(tmp_path, [json.dumps(_good_line()), "{oops"])
    with pytest.raises(ValueError, match=r"requests.jsonl.gz:2: Expecting"):
        load_run(tmp_path)


def test_truncated_gzip(tmp_path: Path) -> None:
    write_run(tmp_path, [ok_record(str(i), i * 0.1) for i in range(200)], {"driver": "test"})
    data = (tmp_path / "requests.jsonl.gz").read_bytes()
    (tmp_path / "requests.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="corrupt gzip stream"):
        load_run(tmp_path)


def test_meta_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"meta\.json"):
        load_run(tmp_path)
    _write_lines(tmp_path, [json.dumps(_good_line())], meta={"format": "other/9", "driver": "x"})
    with pytest.raises(ValueError, match=r"meta.json: format 'other/9'"):
        load_run(tmp_path)
    (tmp_path / "meta.json").write_text("[1, 2")
    with pytest.raises(ValueError, match=r"meta\.json: not valid JSON"):
        load_run(tmp_path)
    _write_lines(tmp_path, [json.dumps(_good_line())], meta={"format": FORMAT, "driver": "x",
                                                              "num_requests": 3})
    with pytest.raises(ValueError, match=r"num_requests=3 but requests\.jsonl\.gz holds 1"):
        load_run(tmp_path)


def test_to_trace_replays_sent_requests_in_order() -> None:
    m = Measurement.from_records(sample_records(), {"driver": "test"})
    trace = m.to_trace()
    assert np.allclose(trace.arrival_s, [0.0, 0.1, 0.3, 0.4, 0.5])  # unsent 'f' left out
    assert trace.input_tokens.tolist() == [100, 100, 100, 50, 50]
    assert trace.output_tokens.tolist() == [4, 4, 4, 8, 8]  # requested, not received
    assert trace.prefix_group is not None and trace.prefix_group.tolist() == [-1, -1, 3, -1, -1]
    assert np.allclose(m.to_trace("scheduled").arrival_s, [0.0, 0.1, 0.25, 0.4, 0.5])
    with pytest.raises(ValueError, match="timing='late'"):
        m.to_trace("late")


def test_records_frame_matches_trace_rows() -> None:
    m = Measurement.from_records(sample_records(), {"driver": "test"})
    frame = m.records_frame()
    assert tuple(frame.columns) == SIM_COLUMNS
    assert frame["request_id"].tolist() == ["a", "c", "b", "d", "e"]
    assert np.allclose(frame["arrival_s"], m.to_trace().arrival_s)
    assert frame["output_tokens"].tolist() == [4, 4, 4, 0, 2]  # received
    assert frame["replica"].eq(0).all()
    assert frame[["first_scheduled_s", "cached_tokens", "preemptions"]].isna().all().all()
    assert frame["status"].tolist() == ["ok", "ok", "ok", "rejected", "unfinished"]  # the simulator's words
    check_records(frame)  # a run with failed and timed-out requests replays (validate read it before)


def test_itl_samples_one_token_chunks() -> None:
    m = Measurement.from_records([ok_record("a", 0.0, gap=0.01, n=5)], {"driver": "t"})
    values, weights = m.itl_samples()
    assert np.allclose(values, 0.01) and np.allclose(weights, 1.0) and len(values) == 4


def test_itl_multi_token_chunks() -> None:
    values, weights = chunk_itl([1.0, 1.02, 1.05], [2, 2, 3])
    assert np.allclose(values, [0.0, 0.01, 0.01]) and np.allclose(weights, [1, 2, 3])


@given(st.lists(st.tuples(st.floats(0, 1), st.integers(1, 4)), min_size=1, max_size=30))
def test_itl_weights_sum_to_tokens_minus_one(chunks: list[tuple[float, int]]) -> None:
    times = np.cumsum([g for g, _ in chunks]).tolist()
    tokens = [k for _, k in chunks]
    values, weights = chunk_itl(times, tokens)
    assert weights.sum() == pytest.approx(sum(tokens) - 1)
    assert (values * weights).sum() == pytest.approx(times[-1] - times[0])
