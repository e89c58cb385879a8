"""scripts/host_reference.py: the probe's median over probed levels becomes the reference host,
every CPU term is re-expressed in its units (GPU-side terms untouched), and a second run leaves
the file alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from latsim.costmodel.host import SPEED_FIELDS
from latsim.engines.vllm import host_write
from latsim.engines.vllm.host_terms import HOST_TERMS_KEY, read_host_terms
from tests.script_module import load_script
from tests.validate.test_host_steps import level


def run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_script(Path("host_reference.py"))
    monkeypatch.setattr("sys.argv", ["scripts/host_reference.py", *argv])
    module.main()


def probed(root: Path, probes_s: list[float | None]) -> None:
    rng = np.random.default_rng(0)
    for i, probe in enumerate(probes_s):
        level(root / f"start{i % 2}", 2 + i, 3e-3, rng, probe_s=probe)


def test_the_median_becomes_the_reference_and_cpu_terms_scale_with_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = tmp_path / "host.yaml"
    shutil.copy(host_write.shipped_path(), hostfile)
    old_ref = yaml.safe_load(hostfile.read_text())["engines"][HOST_TERMS_KEY]["host_reference_probe_s"]
    before = {kind: read_host_terms(hostfile, kind) for kind in ("calibrated", "roofline")}
    new_ref = round(2 * old_ref, 5)
    probed(tmp_path / "runs", [new_ref - 2e-4, new_ref, new_ref + 3e-4, None])  # the unprobed one is left out
    run([str(tmp_path / "runs"), "--write", "--yaml", str(hostfile)], monkeypatch)
    out = capsys.readouterr().out
    assert "3 probed levels, 2 run folders" in out
    assert "written (host_reference_probe_s, host_probe_p10_s, host_probe_p90_s)" in out
    engine = yaml.safe_load(hostfile.read_text())["engines"][HOST_TERMS_KEY]
    assert engine["host_reference_probe_s"] == new_ref
    p10, p90 = np.percentile([new_ref - 2e-4, new_ref, new_ref + 3e-4], [10, 90])
    assert (engine["host_probe_p10_s"], engine["host_probe_p90_s"]) == (round(p10, 5), round(p90, 5))
    assert engine["provenance"]["host_reference"]["results"]["factor"] == pytest.approx(new_ref / old_ref, rel=1e-5)
    for kind, old in before.items():
        new = read_host_terms(hostfile, kind)
        for name in SPEED_FIELDS:  # twice the probe time: twice the CPU seconds
            assert getattr(new, name) == pytest.approx(getattr(old, name) * new_ref / old_ref, rel=1e-3)
        assert (new.gpu_scale, new.launch_tail_s, new.launch_sigma) == (old.gpu_scale, old.launch_tail_s,
                                                                         old.launch_sigma)
    written = hostfile.read_bytes()
    run([str(tmp_path / "runs"), "--write", "--yaml", str(hostfile)], monkeypatch)
    assert "unchanged" in capsys.readouterr().out
    assert hostfile.read_bytes() == written


def test_roots_without_a_probed_level_or_missing_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    probed(tmp_path / "runs", [None, None])
    with pytest.raises(SystemExit, match=r"no level under .* ran the host probe"):
        run([str(tmp_path / "runs")], monkeypatch)
    with pytest.raises(SystemExit) as exc:
        run([str(tmp_path / "absent")], monkeypatch)
    assert exc.value.code == 2 and "not a folder" in capsys.readouterr().err
