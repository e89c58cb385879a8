"""Importing vLLM ``bench serve --save-detailed`` and AIPerf ``profile_export.jsonl`` files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from latsim.measure.importers import import_aiperf, import_vllm_bench
from latsim.measure.records import load_run

DATA = Path(__file__).parent / "data"


def test_vllm_bench_detailed(tmp_path: Path) -> None:
    m = import_vllm_bench(DATA / "vllm_bench_detailed.json", out_dir=tmp_path)
    req = m.requests
    assert req["status"].tolist() == ["ok", "ok", "error", "ok"]
    assert np.allclose(req["sent_s"], [0.0, 0.5, 0.75, 2.25])
    assert req["input_tokens"].tolist() == [512, 256, 768, 128]
    assert req["output_tokens_received"].tolist() == [4, 3, 0, 5]
    assert req["output_tokens"].tolist() == [4, 3, 4, 5]  # the failure gets the median asked-for
    assert np.allclose(req["chunk_times_s"][0], [0.05, 0.06, 0.071, 0.083])
    assert req["first_token_s"][3] == pytest.approx(2.31) and req["finish_s"][3] == pytest.approx(2.35)
    assert req["error"][2] == "Bad Request" and np.isnan(req["first_token_s"][2])
    assert m.meta["load"] == {"mode": "open", "qps": 2.0, "burstiness": 1.0, "concurrency": None}
    assert m.meta["arrivals_known"] is True and m.meta["model"]["name"].endswith("8B-Instruct")
    values, _ = m.itl_samples()
    assert len(values) == 9 and np.allclose(np.sort(values)[-2:], [0.020, 0.020])
    assert list(load_run(tmp_path).records()) == list(m.records())


def test_vllm_bench_without_start_times() -> None:
    m = import_vllm_bench(DATA / "vllm_bench_no_start_times.json")
    assert m.meta["arrivals_known"] is False and m.meta["load"]["mode"] == "burst"
    assert m.requests["sent_s"].eq(0.0).all()
    assert np.allclose(m.requests["finish_s"], [0.11, 0.22])


def test_vllm_bench_appended_results(tmp_path: Path) -> None:
    one = json.loads((DATA / "vllm_bench_no_start_times.json").read_text())
    two = {**one, "input_lens": [7], "output_lens": [1], "ttfts": [0.5], "itls": [[]], "errors": [""]}
    path = tmp_path / "appended.json"
    path.write_text(json.dumps(one) + "\n" + json.dumps(two))
    assert len(import_vllm_bench(path)) == 1 and len(import_vllm_bench(path, which=0)) == 2


def test_vllm_bench_errors(tmp_path: Path) -> None:
    summary_only = tmp_path / "summary.json"
    summary_only.write_text(json.dumps({"duration": 1.0, "completed": 3}))
    with pytest.raises(ValueError, match=r"summary.json: missing per-request key.*--save-detailed"):
        import_vllm_bench(summary_only)
    ragged = tmp_path / "ragged.json"
    ragged.write_text(json.dumps({"input_lens": [1, 2], "output_lens": [1], "ttfts": [0.1, 0.1],
                                  "itls": [[], []]}))
    with pytest.raises(ValueError, match=r"ragged.json: per-request lists differ.*'output_lens': 1"):
        import_vllm_bench(ragged)
    broken = tmp_path / "broken.json"
    broken.write_text('{"input_lens": [1,\n')
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON at line 2"):
        import_vllm_bench(broken)


def test_aiperf_profile_export() -> None:
    m = import_aiperf(DATA / "aiperf_profile_export.jsonl")
    req = m.requests
    assert req["request_id"].tolist() == ["r-1", "r-2", "r-3", "r-4"]  # the warm-up record is skipped
    assert req["status"].tolist() == ["ok", "ok", "error", "timeout"]
    assert req["arrival_s"][0] == 0.0 and req["sent_s"][0] == pytest.approx(0.0004)
    assert req["first_token_s"][0] == pytest.approx(0.2554)
    assert np.allclose(req["chunk_times_s"][0], 0.2554 + np.array([0, 0.014, 0.028, 0.042]))
    assert np.allclose(req["chunk_times_s"][1], 0.5 + np.array([0.1, 0.12, 0.15]))  # sec and us units
    assert req["output_tokens_received"].tolist() == [4, 6, 0, 0]
    assert req["output_tokens"].tolist() == [4, 6, 5, 5]
    assert req["input_tokens"].tolist() == [550, 300, 550, 100]
    assert "RequestCancellationError (499)" in req["error"][2]
    assert req["finish_s"][3] == pytest.approx(12.0)


def test_aiperf_errors(tmp_path: Path) -> None:
    good = (DATA / "aiperf_profile_export.jsonl").read_text().splitlines()[1]
    bad_json = tmp_path / "a.jsonl"
    bad_json.write_text(good + "\n{nope\n")
    with pytest.raises(ValueError, match=r"a.jsonl:2: not valid JSON"):
        import_aiperf(bad_json)
    no_start = tmp_path / "b.jsonl"
    no_start.write_text(good + "\n" + json.dumps({"metadata": {}, "metrics": {}}) + "\n")
    with pytest.raises(ValueError, match=r"b.jsonl:2: missing metadata.request_start_ns"):
        import_aiperf(no_start)
    odd_unit = tmp_path / "c.jsonl"
    odd_unit.write_text(good.replace('"unit": "ms"}, "request_latency"', '"unit": "fortnights"}, '
                                     '"request_latency"'))
    with pytest.raises(ValueError, match=r"c.jsonl:1: metric 'time_to_first_token' has unit 'fortnights'"):
        import_aiperf(odd_unit)
    empty = tmp_path / "d.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"d\.jsonl: no profiling records"):
        import_aiperf(empty)
