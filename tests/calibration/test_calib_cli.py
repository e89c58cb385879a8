"""``latsim calibrate``: exit status 2 with a clear message for GPU problems."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from latsim import cli
from latsim.calibration import cli as calib_cli


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["latsim", "calibrate", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    return int(exc.value.code or 0), capsys.readouterr().err


def test_no_gpu_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def no_gpu(backend: str) -> str:
        raise ValueError(calib_cli.NO_GPU)

    monkeypatch.setattr(calib_cli, "_gpu_name", no_gpu)
    code, err = _run(monkeypatch, capsys, "--device", "h200")
    assert code == 2 and "no CUDA GPU found; use --backend cpu" in err


def test_real_no_gpu_path(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, err = _run(monkeypatch, capsys)
    assert code == 2 and "no CUDA GPU found" in err


def test_wrong_device_names_what_was_found(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(calib_cli, "_gpu_name", lambda backend: "NVIDIA H200")
    code, err = _run(monkeypatch, capsys, "--device", "h100")
    assert code == 2 and "--device h100 was asked for, but this machine's GPU is 'NVIDIA H200'" in err


def test_fit_only_prints_held_out_error(tmp_path: Path, profile_copy: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["latsim", "calibrate", "--fit-only", "--profile", str(profile_copy)])
    cli.main()
    assert "held-out error" in capsys.readouterr().out
    assert (profile_copy / "fit_report.json").is_file()


def test_cpu_backend_needs_out(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(monkeypatch, capsys, "--backend", "cpu")
    assert code == 2 and "--out" in err


def test_unknown_device_is_named_before_looking_for_a_gpu(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(calib_cli, "_gpu_name", lambda backend: "NVIDIA H200")
    code, err = _run(monkeypatch, capsys, "--device", "h1000")
    assert code == 2 and "unknown device 'h1000'" in err and "h100" in err
