"""scripts/fit_input_path.py: input_s read off the bursts' engine-core queue stamps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latsim.engines.vllm.host_terms import reference_probe_s
from latsim.measure.records import RequestRecord, write_run
from latsim.sim.frontend import engine_arrivals
from tests.script_module import load_script

fit = load_script(Path("fit_input_path.py"))

TRUE_INPUT_S = 4e-4
GPUS = {"h200": "NVIDIA H200", "h100": "NVIDIA H100 80GB HBM3"}


def burst(path: Path, gpu: str, speed: float, mode: str = "burst", seed: int = 0) -> Path:
    """200 requests sent over about 50 ms, the first queued by the core after a fixed 1.2 ms
    path (alone, as in the live bursts), the others as the model says at TRUE_INPUT_S on a
    host of ``speed``, plus that path."""
    rng = np.random.default_rng(seed)
    sent = np.cumsum(rng.uniform(0.1e-3, 0.4e-3, 200))
    queued = engine_arrivals(sent, TRUE_INPUT_S / speed) + 1.2e-3
    queued[0] = sent[0] + 1.2e-3
    records = []
    for i, (s, q) in enumerate(zip(sent, queued, strict=True)):
        first = q + 0.05
        records.append(RequestRecord(f"r{i}", 0.0, float(s), 64, 2, 2, first, (first, first + 0.01), None,
                                     first + 0.01, "ok", engine_queued_s=float(q), engine_scheduled_s=float(q),
                                     engine_first_token_s=first - 1e-3, engine_last_token_s=first + 9e-3))
    meta = {"driver": "synthetic", "load": {"mode": mode},
            "host_probe": {"summary": {"probe_p50_s": reference_probe_s() / speed}},
            "engine_config": {"versions": {"gpu": GPUS[gpu]}}}
    return write_run(path, records, meta)


def test_the_fit_recovers_the_work_that_made_the_stamps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i, speed in enumerate((0.8, 1.0, 1.5)):
        burst(tmp_path / f"h200-{i}" / "burst", "h200", speed, seed=i)
        burst(tmp_path / f"h100-{i}" / "burst", "h100", speed, seed=10 + i)
    burst(tmp_path / "open" / "f0.50", "h200", 1.0, mode="open")  # not a burst: left out
    fit.main([str(tmp_path)])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("fitted input_s"))
    fitted = float(line.split()[2]) * 1e-3
    assert fitted == pytest.approx(TRUE_INPUT_S, abs=4e-5)
    assert "(3 training levels on h200, 3 held out)" in line
    errors = line.split(": training ")[1]
    assert float(errors.split(" ms")[0]) < 1.0  # the first request, alone in the data, is held in the model


def test_the_fit_writes_the_term_with_its_provenance(tmp_path: Path) -> None:
    burst(tmp_path / "a" / "burst", "h200", 1.0)
    yaml_path = tmp_path / "host.yaml"
    yaml_path.write_text("engines:\n  vllm-0.25.1:\n    calibrated:\n      step_s: 0.002\n      seq_s: 1.0e-05\n"
                         "      frontend_s: 0.003\n")
    fit.main([str(tmp_path), "--yaml", str(yaml_path), "--write"])
    text = yaml_path.read_text()
    assert "input_s: 0.0004" in text and "fit_input_path:" in text and "training_runs:" in text


def test_a_training_gpu_without_bursts_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    burst(tmp_path / "a" / "burst", "h100", 1.0)
    with pytest.raises(SystemExit) as exc:
        fit.main([str(tmp_path), "--train", "a100"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--train 'a100'" in err and "h100" in err


def test_an_empty_folder_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        fit.main([str(tmp_path)])
    assert exc.value.code == 2 and "holds no measurement" in capsys.readouterr().err
