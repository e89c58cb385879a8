"""latsim.engines.vllm.host_write: terms written with provenance, atomically, only when changed."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest
import yaml

from latsim.costmodel.host import SPEED_FIELDS
from latsim.engines.vllm import host_write
from latsim.engines.vllm.host_terms import HOST_TERMS_KEY, default_host_overhead, read_host_terms
from latsim.provenance import record, same_computation

RECORD = {"command": "python scripts/x.py", "commit": "abc", "date": "2026-12-01T00:00:00Z",
          "inputs": {"runs": {"data/r1": "0123456789abcdef"}}, "results": {"residual_rms_s": 2.3e-4}}


@pytest.fixture
def hostfile(tmp_path: Path) -> Path:
    """A copy of the shipped host-terms file."""
    path = tmp_path / "host.yaml"
    shutil.copy(host_write.shipped_path(), path)
    return path


def test_the_shipped_file_holds_data_only_with_a_record_per_script() -> None:
    """Every entry's terms carry the record of the script that wrote them; no free text."""
    text = host_write.shipped_path().read_text()
    data = yaml.safe_load(text)
    engine = data["engines"][HOST_TERMS_KEY]
    wrote = {("calibrated", "host_steps"): {"step_s", "seq_s"},
             ("calibrated", "launch_gaps"): {"launch_layer_s", "launch_moe_layer_s", "launch_tail_s", "launch_sigma",
                                             "launch_shared_layer_s"},
             ("calibrated", "fit_engine_host"): {"frontend_s", "gpu_scale", "eager_layer_s", "eager_moe_layer_s",
                                                 "launch_moe_layer_s"},
             ("calibrated", "fit_input_path"): {"input_s", "input_window_s"},
             # the CPU terms of the day it ran (the eager terms counted as GPU time until the twentieth session)
             # and before the shared expert's launch (fifty-first session) and the input path (fifty-eighth)
             ("calibrated", "host_reference"): set(SPEED_FIELDS) - {"eager_layer_s", "eager_moe_layer_s",
                                                                    "launch_shared_layer_s", "input_s"},
             ("roofline", "fit_engine_host"): {"gpu_scale", "eager_layer_s", "eager_moe_layer_s"}}
    for (entry, script), terms in wrote.items():
        rec = engine[entry]["provenance"][script]
        described, older = set(rec["terms"]), rec.get("earlier")
        while older:  # terms an earlier run of the script set and the latest did not rewrite
            assert not described & set(older["terms"]) and older["command"].startswith(f"python scripts/{script}.py")
            described, older = described | set(older["terms"]), older.get("earlier")
        assert described == terms
        assert {"command", "commit", "date", "inputs", "results"} <= set(rec)
        assert rec["command"].startswith(f"python scripts/{script}.py")
    reference = engine["provenance"]["host_reference"]
    assert reference["terms"] == ["host_reference_probe_s", "host_probe_p10_s", "host_probe_p90_s"]
    assert set(engine["provenance"]) == {"host_reference"}  # the reference's first record moved into it
    assert reference["replaces"]["host_steps"]["terms"] == ["host_reference_probe_s"]
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert len(comments) <= 3 and all(line.startswith("#") for line in comments)  # the header only
    assert default_host_overhead("calibrated").step_s == engine["calibrated"]["step_s"]


def test_written_terms_are_read_back_by_the_loader(hostfile: Path) -> None:
    assert host_write.write_terms(hostfile, {"step_s": 2.5e-3, "seq_s": 1.25e-5}, RECORD,
                                  script="host_steps", entry="calibrated")
    calibrated = read_host_terms(hostfile, "calibrated")
    assert (calibrated.step_s, calibrated.seq_s) == (2.5e-3, 1.25e-5)
    assert read_host_terms(hostfile, "roofline").step_s == 2.5e-3  # cpu_terms_from: calibrated
    saved = yaml.safe_load(hostfile.read_text())["engines"][HOST_TERMS_KEY]["calibrated"]
    assert list(saved)[-1] == "provenance"
    assert saved["provenance"]["host_steps"] == {"terms": ["step_s", "seq_s"], **RECORD}


def test_a_record_whose_terms_are_all_rewritten_moves_into_the_new_one(hostfile: Path) -> None:
    assert host_write.write_terms(hostfile, {"host_reference_probe_s": 1e-3}, RECORD, script="host_steps", entry=None)
    args = {"script": "host_reference", "entry": None, "supersedes": ("host_steps", "launch_gaps")}
    assert host_write.write_terms(hostfile, {"host_reference_probe_s": 2e-3}, RECORD, **args)
    provenance = yaml.safe_load(hostfile.read_text())["engines"][HOST_TERMS_KEY]["provenance"]
    assert "host_steps" not in provenance
    assert provenance["host_reference"]["replaces"]["host_steps"] == {"terms": ["host_reference_probe_s"], **RECORD}
    assert not host_write.write_terms(hostfile, {"host_reference_probe_s": 2e-3}, RECORD, **args)  # kept, unchanged
    # a record with a term not written now still describes the file: it stays
    assert host_write.write_terms(hostfile, {"step_s": 2e-3, "seq_s": 1e-5}, RECORD, script="host_steps",
                                  entry="calibrated")
    assert host_write.write_terms(hostfile, {"step_s": 3e-3}, RECORD, script="host_reference", entry="calibrated",
                                  supersedes=("host_steps",))
    calibrated = yaml.safe_load(hostfile.read_text())["engines"][HOST_TERMS_KEY]["calibrated"]["provenance"]
    assert "host_steps" in calibrated and "replaces" not in calibrated["host_reference"]


def test_rewriting_some_of_a_script_s_terms_keeps_its_earlier_record_for_the_rest(hostfile: Path) -> None:
    first, second, third = ({**RECORD, "command": f"python scripts/fit_engine_host.py --run {i}"} for i in (1, 2, 3))
    args = {"script": "fit_engine_host", "entry": "calibrated"}
    shipped = yaml.safe_load(hostfile.read_text())["engines"][HOST_TERMS_KEY]["calibrated"]["provenance"]
    shipped_terms = shipped["fit_engine_host"]["terms"]
    terms = {"frontend_s": 3e-3, "gpu_scale": 1.0, "eager_layer_s": 1e-4}
    assert host_write.write_terms(hostfile, terms, first, **args)
    assert host_write.write_terms(hostfile, {"eager_layer_s": 1e-5}, second, **args)
    rec = yaml.safe_load(hostfile.read_text())["engines"][HOST_TERMS_KEY]["calibrated"]["provenance"]["fit_engine_host"]
    assert rec["terms"] == ["eager_layer_s"] and rec["command"].endswith("--run 2")
    assert rec["earlier"]["terms"] == ["frontend_s", "gpu_scale"] and rec["earlier"]["command"].endswith("--run 1")
    assert host_write.write_terms(hostfile, {"eager_layer_s": 2e-5, "gpu_scale": 0.9}, third, **args)
    rec = yaml.safe_load(hostfile.read_text())["engines"][HOST_TERMS_KEY]["calibrated"]["provenance"]["fit_engine_host"]
    earlier = rec["earlier"]
    assert {k: v for k, v in earlier.items() if k != "earlier"} == {**first, "terms": ["frontend_s"]}
    assert earlier["earlier"]["terms"] == shipped_terms  # the shipped file's record, kept beneath


def test_a_new_file_is_created_with_the_engine_level_term(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "host.yaml"
    assert host_write.write_terms(path, {"host_reference_probe_s": 1.5e-3}, RECORD, script="host_steps", entry=None)
    data = yaml.safe_load(path.read_text())
    assert data["engines"][HOST_TERMS_KEY]["host_reference_probe_s"] == 1.5e-3
    assert path.read_text().startswith(host_write.HEADER)


def test_nothing_is_rewritten_when_only_command_commit_or_date_differ(hostfile: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    terms = {"launch_sigma": 0.3}
    assert host_write.write_terms(hostfile, terms, RECORD, script="launch_gaps", entry="calibrated")
    before, stat = hostfile.read_bytes(), hostfile.stat()
    writes: list[Path] = []
    monkeypatch.setattr(host_write, "atomic_write_text", lambda path, text: writes.append(path))
    later = {**RECORD, "command": "python other.py", "commit": "def+dirty", "date": "2027-01-01T00:00:00Z"}
    assert not host_write.write_terms(hostfile, terms, later, script="launch_gaps", entry="calibrated")
    assert writes == [] and hostfile.read_bytes() == before and hostfile.stat().st_mtime_ns == stat.st_mtime_ns
    other_inputs = {**RECORD, "inputs": {"runs": {"data/r1": "ffffffffffffffff"}}}
    assert host_write.write_terms(hostfile, terms, other_inputs, script="launch_gaps", entry="calibrated")
    assert host_write.write_terms(hostfile, {"launch_sigma": 0.31}, other_inputs, script="launch_gaps",
                                  entry="calibrated")
    assert len(writes) == 2


def test_a_failed_write_leaves_the_old_file_whole(hostfile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = hostfile.read_bytes()

    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("latsim.atomic.os.replace", fail)
    with pytest.raises(OSError, match="disk full"):
        host_write.write_terms(hostfile, {"step_s": 9e-3}, RECORD, script="host_steps", entry="calibrated")
    assert hostfile.read_bytes() == before
    assert sorted(os.listdir(hostfile.parent)) == ["host.yaml"]  # no temporary file left behind


@pytest.mark.parametrize(("terms", "entry", "message"), [
    ({"warp_s": 1.0}, "calibrated", "term 'warp_s' cannot be written to entry 'calibrated'; accepted: step_s"),
    ({"host_reference_probe_s": 1e-3}, "calibrated", "'host_reference_probe_s' cannot be written"),
    ({"step_s": 1e-3}, None, "term 'step_s' cannot be written to the engine's own mapping; accepted: host_ref"),
    ({"step_s": -1e-3}, "calibrated", r"term step_s=-0.001: expected a finite number >= 0"),
    ({"seq_s": math.nan}, "calibrated", r"term seq_s=nan: expected a finite number >= 0"),
    ({"seq_s": "1e-3"}, "calibrated", r"term seq_s='1e-3': expected a finite number >= 0"),
    ({"frontend_s": 1e-3}, "roofline", "entry 'roofline' takes its CPU terms from 'calibrated': cannot write "
                                       "frontend_s"),
    ({}, "calibrated", "no terms to write"),
    ({"gpu_scale": 12.0}, "calibrated", r"gpu_scale must be in \(0, 10\)"),
])
def test_bad_terms_are_refused_and_the_file_kept(hostfile: Path, terms: dict, entry: str | None,
                                                 message: str) -> None:
    before = hostfile.read_bytes()
    with pytest.raises(ValueError, match=message):
        host_write.write_terms(hostfile, terms, RECORD, script="x", entry=entry)
    assert hostfile.read_bytes() == before


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "host.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="expected a mapping at the top, got list"):
        host_write.write_terms(path, {"step_s": 1e-3}, RECORD, script="x", entry="calibrated")
    path.write_text("engines:\n  vllm-0.25.1:\n    calibrated:\n      step_s: 1.0e-3\n      provenance: some text\n")
    with pytest.raises(ValueError, match="calibrated/provenance is a str, expected a mapping"):
        host_write.write_terms(path, {"step_s": 1e-3}, RECORD, script="x", entry="calibrated")


def test_a_record_carries_command_commit_date_inputs_results() -> None:
    rec = record({"runs": {"a": "b"}}, {"loss": 0.5}, argv=["scripts/x.py", "--write"], date="2026-12-01T00:00:00Z")
    assert rec["command"] == "python scripts/x.py --write"
    assert rec["commit"] is None or len(rec["commit"].split("+")[0]) == 40
    assert same_computation(rec, {**rec, "date": "later", "commit": "other", "command": "python y.py"})
    assert not same_computation(rec, {**rec, "results": {"loss": 0.6}})
    with pytest.raises(ValueError, match="provenance value nan is not finite"):
        record({}, {"loss": math.nan})
