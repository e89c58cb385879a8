"""``--write`` of the scripts behind host.yaml: on small fake runs each writes terms the loader
reads, with the inputs' digests in the provenance, and a second identical run leaves the file alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from latsim.engines.vllm import host_write
from latsim.engines.vllm.host_terms import HOST_TERMS_KEY, read_host_terms
from latsim.measure.records import RequestRecord, write_run
from latsim.paths import CATALOG
from latsim.provenance import run_digest
from tests.script_module import load_script
from tests.validate.test_host_steps import level


@pytest.fixture
def hostfile(tmp_path: Path) -> Path:
    path = tmp_path / "host.yaml"
    shutil.copy(host_write.shipped_path(), path)
    return path


def run_script(name: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_script(Path(name))
    monkeypatch.setattr("sys.argv", [f"scripts/{name}", *argv])
    module.main()


def engine(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())["engines"][HOST_TERMS_KEY]


def test_host_steps_writes_the_line_then_leaves_the_file_alone(tmp_path: Path, hostfile: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "sweep"
    rng = np.random.default_rng(3)
    for c in (1, 2, 8, 32, 128):
        level(sweep, c, 2.1234e-3 + 1.5678e-5 * c, rng)
    run_script("host_steps.py", [str(sweep), "--write", "--yaml", str(hostfile)], monkeypatch)
    assert "host.yaml: written (step_s, seq_s)" in capsys.readouterr().out
    calibrated = read_host_terms(hostfile, "calibrated")
    assert (calibrated.step_s, calibrated.seq_s) == (2.123e-3, 1.568e-5)  # to 1 us and 0.01 us
    rec = engine(hostfile)["calibrated"]["provenance"]["host_steps"]
    assert rec["inputs"]["sweeps"] == {sweep.as_posix(): run_digest(sweep)}
    assert rec["results"]["levels"] == [2, 8, 32, 128]
    assert rec["results"]["residual_rms_s"] == pytest.approx(0.0, abs=1e-9)
    before = hostfile.read_bytes()
    run_script("host_steps.py", [str(sweep), "--write", "--yaml", str(hostfile)], monkeypatch)
    assert "host.yaml: unchanged" in capsys.readouterr().out
    assert hostfile.read_bytes() == before


def test_host_steps_writes_a_slow_sweeps_line_in_the_reference_hosts_units(
        tmp_path: Path, hostfile: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep whose host ran at half the reference (its probe twice as long) took twice the
    reference's host time per step: the file gets the reference's line."""
    rng = np.random.default_rng(5)
    ref = engine(hostfile)["host_reference_probe_s"]
    slow = tmp_path / "slow"
    for c in (2, 8, 32, 128):
        level(slow, c, 2 * (2e-3 + 1e-5 * c), rng, probe_s=2 * ref)
    for speed in ("probe", "0.5"):
        run_script("host_steps.py", [str(slow), "--host-speed", speed, "--write", "--yaml", str(hostfile)], monkeypatch)
        calibrated = read_host_terms(hostfile, "calibrated")
        assert (calibrated.step_s, calibrated.seq_s) == (2e-3, 1e-5)
    assert engine(hostfile)["calibrated"]["provenance"]["host_steps"]["inputs"]["host_speed"] == 0.5
    assert "at the reference host (x0.500)" in capsys.readouterr().out


def test_host_steps_against_prints_and_writes_nothing(tmp_path: Path, hostfile: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(5)
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    for c in (128, 256):
        level(fast, c, 2e-3 + 1e-5 * c, rng)
        level(slow, c, 2 * (2e-3 + 1e-5 * c), rng, probe_s=2.4e-3)
    with pytest.raises(SystemExit) as exc:
        run_script("host_steps.py", [str(slow), "--against", str(fast), "--write", "--yaml", str(hostfile)],
                   monkeypatch)
    assert exc.value.code == 2 and "writes nothing" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run_script("host_steps.py", [str(fast), "--host-speed", "probe"], monkeypatch)
    assert exc.value.code == 2 and "no level under" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run_script("host_steps.py", [str(fast), "--host-speed", "fast"], monkeypatch)
    assert exc.value.code == 2 and "--host-speed 'fast'" in capsys.readouterr().err


def launch_run(root: Path, layers: int, launches_s: list[float], tail_s: float) -> Path:
    """A run whose requests' first tokens each follow a held launch of the given length: a
    background request emits at every step (5 ms apart), then the launch, then ``tail_s``
    later the new request's only token with the background's."""
    t, bg_times, records = 0.1, [], []
    for i, launch in enumerate(launches_s):
        bg_times += [t, t + 0.005, t + 0.010]
        t += 0.010
        first = t + launch + tail_s
        bg_times += [t + launch, first]
        records.append(RequestRecord(f"r{i}", first - 0.05, first - 0.05, 512, 1, 1, first, (first,), None,
                                     first, "ok"))
        t = first + 0.005
    bg = tuple(bg_times)
    records.append(RequestRecord("bg", 0.0, 0.0, 32, len(bg), len(bg), bg[0], bg, None, bg[-1], "ok"))
    return write_run(root, records, {"driver": "synthetic", "model": {"config": {"num_hidden_layers": layers}}})


def test_launch_gaps_writes_the_four_launch_terms(tmp_path: Path, hostfile: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    dense_launches = [0.020, 0.022, 0.024, 0.026, 0.030, 0.021, 0.025]
    dense = launch_run(tmp_path / "dense", 32, dense_launches, 3e-3)
    moe = launch_run(tmp_path / "moe", 48, [0.060, 0.062, 0.064], 4e-3)
    argv = [str(dense), "--moe", str(moe), "--sigma", str(dense), "--step-s", "1e-3", "--seq-s", "1e-5",
            "--write", "--yaml", str(hostfile)]
    run_script("launch_gaps.py", argv, monkeypatch)
    host = 1e-3 + 1e-5 * 2  # the launched step carries the background and the new request
    layer = (np.median(dense_launches) - host) / 32
    p10, p90 = np.percentile(dense_launches, [10, 90])
    calibrated = read_host_terms(hostfile, "calibrated")
    assert calibrated.launch_layer_s == round(layer, 6)
    assert calibrated.launch_moe_layer_s == round((0.062 - host) / 48 - layer, 6)
    assert calibrated.launch_tail_s == 3e-3
    assert calibrated.launch_sigma == round(np.log(p90 / p10) / 2.563, 2)
    rec = engine(hostfile)["calibrated"]["provenance"]["launch_gaps"]
    assert rec["inputs"]["moe_runs"] == {moe.as_posix(): run_digest(moe)}
    assert rec["inputs"]["host"] == {"step_s": 1e-3, "seq_s": 1e-5}
    before = hostfile.read_bytes()
    run_script("launch_gaps.py", argv, monkeypatch)
    assert hostfile.read_bytes() == before
    # the same gaps on a host at half the reference's speed: its host work took twice as long,
    # and the CPU per layer left is the reference's half of what was seen; tail and spread kept
    run_script("launch_gaps.py", [*argv, "--host-speed", "0.5"], monkeypatch)
    slow = read_host_terms(hostfile, "calibrated")
    assert slow.launch_layer_s == round(0.5 * (np.median(dense_launches) - 2 * host) / 32, 6)
    assert (slow.launch_tail_s, slow.launch_sigma) == (calibrated.launch_tail_s, calibrated.launch_sigma)


def test_launch_gaps_writes_the_shared_expert_term_alone(tmp_path: Path, hostfile: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``--shared``: the shared-expert model's per-layer launch over the MoE model's of the same
    machine, less one, times the file's MoE layer; ``--terms`` writes it and leaves the others."""
    dense = launch_run(tmp_path / "dense", 32, [0.020, 0.022, 0.024], 3e-3)
    moe = launch_run(tmp_path / "moe", 48, [0.060, 0.062, 0.064], 4e-3)
    shared = launch_run(tmp_path / "shared", 24, [0.048, 0.050, 0.052], 4e-3)
    before = read_host_terms(hostfile, "calibrated")
    argv = [str(dense), "--moe", str(moe), "--shared", str(shared), "--step-s", "1e-3", "--seq-s", "1e-5",
            "--terms", "launch_shared_layer_s", "--write", "--yaml", str(hostfile)]
    run_script("launch_gaps.py", argv, monkeypatch)
    host = 1e-3 + 1e-5 * 2
    ratio = ((0.050 - host) / 24) / ((0.062 - host) / 48)
    after = read_host_terms(hostfile, "calibrated")
    moe_layer = before.launch_layer_s + before.launch_moe_layer_s
    assert after.launch_shared_layer_s == round((ratio - 1.0) * moe_layer, 6) > 0.0
    assert (after.launch_layer_s, after.launch_moe_layer_s, after.launch_tail_s) == (
        before.launch_layer_s, before.launch_moe_layer_s, before.launch_tail_s)
    rec = engine(hostfile)["calibrated"]["provenance"]["launch_gaps"]
    assert rec["terms"] == ["launch_shared_layer_s"]
    assert rec["inputs"]["shared_runs"] == {shared.as_posix(): run_digest(shared)}
    assert "launch_layer_s" in rec["earlier"]["terms"]  # the earlier record of the other terms is kept
    capsys.readouterr()
    for bad, says in ((["--shared", str(shared)], "--shared needs --moe runs"),
                      (["--terms", "launch_shared_layer_s"], "--terms launch_shared_layer_s: not measured")):
        with pytest.raises(SystemExit) as exc:
            run_script("launch_gaps.py", [str(dense), *bad], monkeypatch)
        assert exc.value.code == 2 and says in capsys.readouterr().err


def poisson_run(root: Path, rng: np.random.Generator) -> Path:
    """A small open-loop level of Llama-3.2-1B: first token 40 ms after sending, then 8 ms per token."""
    config = json.loads((CATALOG / "models" / "llama-3.2-1b.json").read_text())
    records = []
    for i, sent in enumerate(np.cumsum(rng.exponential(0.1, 30))):
        times = tuple(float(sent + 0.04 + 0.008 * k + rng.uniform(0, 1e-3)) for k in range(8))
        records.append(RequestRecord(f"p{i}", float(sent), float(sent), 256, 8, 8, times[0], times, None,
                                     times[-1], "ok"))
    meta = {"driver": "synthetic", "load": {"mode": "open"}, "model": {"name": "llama-3.2-1b", "config": config},
            "engine_config": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_model_len": 4096}}
    return write_run(root, records, meta)


def test_fit_engine_host_writes_the_freed_terms(tmp_path: Path, hostfile: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    train = poisson_run(tmp_path / "runs" / "h200" / "train" / "f0.25", rng)
    held = poisson_run(tmp_path / "runs" / "h200" / "other" / "f0.25", rng)
    argv = ["--root", str(tmp_path / "runs"), "--dense-train", "h200/train/", "--dense-free", "frontend_s",
            "--start", "frontend_s=5e-3", "--moe-free", "", "--write", "--yaml", str(hostfile)]
    run_script("fit_engine_host.py", argv, monkeypatch)
    rec = engine(hostfile)["calibrated"]["provenance"]["fit_engine_host"]
    fitted = read_host_terms(hostfile, "calibrated")
    assert rec["terms"] == ["frontend_s"]
    assert fitted.frontend_s == float(f"{rec['results']['fitted']['frontend_s']:.4g}")
    assert rec["results"]["median_abs_error_at_written"]["dense"]["ttft_p50"] < 0.1  # a TTFT of 40 ms fitted
    assert rec["inputs"]["dense_runs"] == {train.as_posix(): run_digest(train)}
    assert rec["inputs"]["held_out_runs"]["count"] == 1
    assert rec["inputs"]["held"]["gpu_scale"] == fitted.gpu_scale  # held terms kept
    assert set(rec["results"]["median_abs_error_at_written"]) == {"dense", "moe", "held_out"}
    assert run_digest(held) != run_digest(train)
    before = hostfile.read_bytes()
    run_script("fit_engine_host.py", argv, monkeypatch)  # the same fit from the same start
    assert hostfile.read_bytes() == before


def test_host_steps_refuses_to_write_a_negative_term(tmp_path: Path, hostfile: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = tmp_path / "sweep"
    for c in (2, 8, 32):
        level(sweep, c, 5e-3 - 1e-5 * c, np.random.default_rng(c))  # faster with more in flight
    before = hostfile.read_bytes()
    with pytest.raises(SystemExit, match=r"host.yaml: term seq_s=-1e-05: expected a finite number >= 0"):
        run_script("host_steps.py", [str(sweep), "--write", "--yaml", str(hostfile)], monkeypatch)
    assert hostfile.read_bytes() == before


def test_launch_gaps_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dense = launch_run(tmp_path / "dense", 32, [0.020, 0.022], 3e-3)
    other = launch_run(tmp_path / "other", 48, [0.020, 0.022], 3e-3)
    with pytest.raises(SystemExit, match=r"moe runs of different layer counts \[32, 48\] cannot be pooled"):
        run_script("launch_gaps.py", [str(dense), "--moe", str(dense), str(other)], monkeypatch)
    short = launch_run(tmp_path / "short", 32, [0.004, 0.005], 3e-3)  # no gap long enough to be held
    with pytest.raises(SystemExit, match=r"no held launch \(a gap above 8 ms"):
        run_script("launch_gaps.py", [str(short)], monkeypatch)
    bare = launch_run(tmp_path / "bare", 0, [0.020], 3e-3)
    with pytest.raises(SystemExit, match=r"bare: meta\.json has no model\.config\.num_hidden_layers"):
        run_script("launch_gaps.py", [str(bare)], monkeypatch)


def test_fit_engine_host_says_what_is_wrong(tmp_path: Path, hostfile: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    poisson_run(tmp_path / "runs" / "h200" / "train" / "f0.25", np.random.default_rng(1))
    base = ["--root", str(tmp_path / "runs"), "--yaml", str(hostfile), "--moe-free", ""]
    with pytest.raises(SystemExit) as exc:
        run_script("fit_engine_host.py", [*base, "--dense-free", "warp_s"], monkeypatch)
    assert exc.value.code == 2 and "free term 'warp_s' is not one of" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run_script("fit_engine_host.py", [*base, "--host-speed", "0"], monkeypatch)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--host-speed '0': expected 'probe', 'probe-mean' or a number" in err
    with pytest.raises(SystemExit, match=r"--start warp_s=1: 'warp_s' is not one of"):
        run_script("fit_engine_host.py", [*base, "--start", "warp_s=1"], monkeypatch)
    with pytest.raises(SystemExit, match=r"no Poisson level under .* matches --dense-train 'nothing'"):
        run_script("fit_engine_host.py", [*base, "--dense-train", "nothing"], monkeypatch)
