"""scripts/graphless_steps.py: reading a graph-less step's launch and end from the decoders' emissions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.script_module import load_script

gl = load_script(Path("graphless_steps.py"))


def test_cycle_parts_reads_decision_launch_end_and_first_token() -> None:
    # decode steps every 5 ms, the prompt's step decided after the emission at 3.0, the running
    # step's outputs held until its launch ended at 25.0, its first token seen 0.4 ms into the
    # emission of its own step at 28.6
    prompt = {"ttft_ms": 29.0, "emissions_ms": [-7.0, -2.0, 3.0, 25.0, 28.6, 34.0]}
    assert gl.cycle_parts(prompt) == (3.0, 25.0, 29.0)


def test_cycle_parts_needs_two_emissions_before_the_first_token() -> None:
    assert gl.cycle_parts({"ttft_ms": 20.0, "emissions_ms": [3.0, 19.9]}) is None
    assert gl.cycle_parts({"ttft_ms": 20.0, "emissions_ms": []}) is None
    # no emission within 1.5 ms before the first token: the decoders did not see that step
    assert gl.cycle_parts({"ttft_ms": 20.0, "emissions_ms": [1.0, 5.0, 10.0, 15.0]}) is None


def test_run_speed_is_the_mean_of_the_probes() -> None:
    meta = {"host_speed_before": {"host_speed": 1.2}, "host_speed_after": {"host_speed": 1.0}}
    assert gl.run_speed(meta) == pytest.approx(1.1)
    assert gl.run_speed({}) == 1.0


def test_a_scenario_is_priced_at_its_own_probes(tmp_path: Path) -> None:
    assert gl.scenario_speed({"host_speed_before": {"host_speed": 0.8}, "host_speed_after": {"host_speed": 0.6}},
                             1.2) == pytest.approx(0.7)
    assert gl.scenario_speed({}, 1.2) == 1.2
    folder = _timings(tmp_path / "run", decodes=16)
    meta = json.loads((folder / "timings.json").read_text())
    slow = {**meta["scenarios"][0], "host_speed_before": {"host_speed": 0.5}, "host_speed_after": {"host_speed": 0.5}}
    slow["scenario"] = {**slow["scenario"], "load": 12}
    meta["scenarios"].append(slow)
    (folder / "timings.json").write_text(json.dumps(meta))
    speed, (fast_row, slow_row) = gl.folder_rows(folder)
    assert speed == 1.0 and (fast_row["host_speed"], slow_row["host_speed"]) == (1.0, 0.5)
    assert (fast_row["load"], slow_row["load"]) == (0, 12)
    assert slow_row["model_launch_ms"] == pytest.approx(2.0 * fast_row["model_launch_ms"], rel=1e-6)


def _timings(folder: Path, decodes: int) -> Path:
    folder.mkdir()
    sc = {"kind": "graphless", "label": f"graphless:in=1024,n=2,decodes={decodes},din=512", "in": 1024,
          "n": 2, "decodes": decodes, "din": 512}
    prompts = [{"ttft_ms": 40.0, "emissions_ms": [-3.0, 2.0, 30.0, 39.5]},
               {"ttft_ms": 44.0, "emissions_ms": [4.0, 36.0, 43.8]}]
    meta = {"argv": ["device_trace.py", "--model", "llama-3.1-8b", "--engine-arg", "max_model_len=8192"],
            "host_speed_before": {"host_speed": 1.0}, "host_speed_after": {"host_speed": 1.0},
            "scenarios": [{"scenario": sc, "decode_itl_quiet_ms": 5.0, "prompts": prompts}],
            "engine_config": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}}
    (folder / "timings.json").write_text(json.dumps(meta))
    return folder


def test_a_graphless_row_prices_the_step_both_ways(tmp_path: Path) -> None:
    folder = _timings(tmp_path / "run", decodes=16)
    speed, (row,) = gl.folder_rows(folder)
    assert speed == 1.0 and row["graphless"] and row["tokens"] == 1040 and row["cycles"] == 2
    assert row["launch_ms"] == pytest.approx((28.0 + 32.0) / 2) and row["cycle_ms"] == pytest.approx((38.0 + 40.0) / 2)
    assert row["model_gpu_ms"] > row["model_gpu_less_eager_ms"] > 0
    tail = 1e3 * gl.cost_model(json.loads((folder / "timings.json").read_text()), 1.0).launch_tail_s
    assert tail > 0
    for cycle, gpu in (("model_cycle_ms", "model_gpu_ms"), ("model_cycle_less_eager_ms", "model_gpu_less_eager_ms")):
        assert row[cycle] == pytest.approx(max(5.0 + row[gpu], row["model_launch_ms"] + tail), rel=1e-6)


def test_the_csv_keeps_labels_with_commas_whole(tmp_path: Path) -> None:
    text = gl.table_csv([{"scenario": "graphless:in=512,n=2", "x": 1.23456}, {"scenario": "b", "y": 2.0}])
    assert text.splitlines() == ["scenario,x,y", '"graphless:in=512,n=2",1.235,', "b,,2"]


def test_a_folder_without_timings_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gl.main([str(tmp_path)]) == 2
    assert "no timings.json" in capsys.readouterr().err


def test_a_run_without_a_catalog_model_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _timings(tmp_path / "run", decodes=16)
    meta = json.loads((folder / "timings.json").read_text())
    meta["argv"] = ["device_trace.py", "--config-dir", "/tmp/x"]
    (folder / "timings.json").write_text(json.dumps(meta))
    assert gl.main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert "names no catalog model" in err and "config.json" in err


def test_a_config_dir_run_is_priced_from_the_config_beside_its_timings(tmp_path: Path) -> None:
    folder = _timings(tmp_path / "run", decodes=16)
    meta = json.loads((folder / "timings.json").read_text())
    meta["argv"] = ["device_trace.py", "--config-dir", "/tmp/x", "--engine-arg", "max_model_len=8192"]
    (folder / "timings.json").write_text(json.dumps(meta))
    catalog = Path(gl.__file__).resolve().parents[1] / "latsim" / "data" / "catalog" / "models"
    small, large = (json.loads((catalog / f"{n}.json").read_text()) for n in ("llama-3.1-8b", "qwen2.5-32b"))
    (folder / "config.json").write_text(json.dumps(small))
    _, (row8,) = gl.folder_rows(folder)
    (folder / "config.json").write_text(json.dumps(large))
    _, (row32,) = gl.folder_rows(folder)
    named = _timings(tmp_path / "named", decodes=16)
    _, (catalog_row,) = gl.folder_rows(named)
    assert row8["model_gpu_ms"] == pytest.approx(catalog_row["model_gpu_ms"])
    # the 32B's 64 layers launch twice the 8B's 32 and its step costs more
    assert row32["model_launch_ms"] > 1.5 * row8["model_launch_ms"] and row32["model_gpu_ms"] > 2 * row8["model_gpu_ms"]


def test_a_steps_tokens_taken_in_two_bursts_are_one_emission() -> None:
    assert gl.merged([0.0, 1.8, 13.0, 15.1, 27.0], 6.0) == [0.0, 13.0, 27.0]
    assert gl.merged([0.0, 1.8, 13.0], 0.0) == [0.0, 1.8, 13.0]
    # decode steps every 13 ms, each seen in two bursts 2 ms apart; the prompt's step decided at
    # the emission at 0.0, its launch ended at 40.0, its first token in its step's second burst
    prompt = {"ttft_ms": 54.3, "emissions_ms": [-13.0, -11.0, 0.0, 2.0, 40.0, 42.0, 52.0, 54.0]}
    assert gl.cycle_parts(prompt) == (42.0, 52.0, 54.3)  # unmerged: a step's second burst read as a step
    assert gl.cycle_parts(prompt, 6.5) == (0.0, 40.0, 54.3)


def test_the_runs_executor_is_recorded_or_asked_for_or_vllms_default() -> None:
    argv = ["device_trace.py", "--model", "llama-3.1-8b"]
    assert gl.run_executor({"argv": argv}) == "uni"
    assert gl.run_executor({"argv": [*argv, "--engine-arg", "tensor_parallel_size=2"]}) == "mp"
    assert gl.run_executor({"argv": [*argv, "--engine-arg", 'distributed_executor_backend="mp"']}) == "mp"
    assert gl.run_executor({"argv": argv, "engine_config": {"tp": 2}}) == "mp"
    assert gl.run_executor({"argv": [*argv, "--engine-arg", "tensor_parallel_size=2"],
                            "engine_config": {"executor": "uni"}}) == "uni"


def test_a_worker_run_reads_no_launch_and_gets_the_cycle_without_the_steps_host_work(tmp_path: Path) -> None:
    folder = _timings(tmp_path / "run", decodes=16)
    meta = json.loads((folder / "timings.json").read_text())
    _, (engine_core,) = gl.folder_rows(folder)
    meta["engine_config"]["executor"] = "mp"
    (folder / "timings.json").write_text(json.dumps(meta))
    _, (worker,) = gl.folder_rows(folder)
    assert engine_core["executor"] == "uni" and "model_cycle_worker_ms" not in engine_core
    assert worker["executor"] == "mp" and worker["cycle_ms"] == engine_core["cycle_ms"]
    assert np.isnan(worker["launch_ms"]) and np.isnan(worker["tail_ms"]) and not np.isnan(engine_core["launch_ms"])
    cm = gl.cost_model(meta, 1.0)
    shape = gl.BatchShape.from_chunks([(1024, 0)], [512 + 200] * 16)
    gpu, host = cm.parts(shape)
    expected = 1e3 * max(5e-3 + gpu, cm.launch_s(shape) - host + cm.launch_tail_s)
    assert worker["model_cycle_worker_ms"] == pytest.approx(expected, rel=1e-6)
    assert worker["model_cycle_worker_ms"] < worker["model_cycle_ms"] == engine_core["model_cycle_ms"]


def test_a_run_whose_executor_latsim_does_not_model_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _timings(tmp_path / "run", decodes=16)
    meta = json.loads((folder / "timings.json").read_text())
    meta["engine_config"]["executor"] = "ray"
    (folder / "timings.json").write_text(json.dumps(meta))
    assert gl.main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert "'ray'" in err and "uni, mp" in err


def test_a_run_is_priced_at_its_own_tensor_parallelism() -> None:
    meta = {"argv": ["device_trace.py", "--model", "llama-3.1-8b"], "engine_config": {"max_num_batched_tokens": 8192}}
    one = gl.cost_model(meta, 1.0)
    recorded = gl.cost_model({**meta, "engine_config": {"max_num_batched_tokens": 8192, "tp": 2}}, 1.0)
    asked = gl.cost_model({**meta, "argv": [*meta["argv"], "--engine-arg", "tensor_parallel_size=2"]}, 1.0)
    assert one.inner.tp == 1 and recorded.inner.tp == asked.inner.tp == 2
