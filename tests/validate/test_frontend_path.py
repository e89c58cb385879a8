"""scripts/frontend_path.py: the front end's fixed latency read off the engine's own stamps, at
the reference host; scripts/dense_fit_stability.py's command line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latsim.engines.vllm.host_terms import reference_probe_s
from latsim.measure.records import RequestRecord, write_run
from tests.script_module import load_script

frontend = load_script(Path("frontend_path.py"))
stability = load_script(Path("dense_fit_stability.py"))

INPUT_S, OUTPUT_S, STEP_S = 1.5e-3, 0.8e-3, 8e-3


def level(path: Path, probe_s: float, engine_times: bool = True, mode: str = "open") -> Path:
    """200 requests whose input path is ``INPUT_S`` plus a wait for a running step (uniform over
    ``STEP_S``) and whose output path is ``OUTPUT_S`` plus up to 1 ms for the requests running."""
    rng = np.random.default_rng(3)
    records = []
    for i, sent in enumerate(np.cumsum(rng.exponential(0.02, 200))):
        queued = sent + INPUT_S + rng.uniform(0, STEP_S)
        stamp = queued + 0.02
        first = stamp + OUTPUT_S + rng.uniform(0, 1e-3)
        times = {"engine_queued_s": queued, "engine_scheduled_s": queued, "engine_first_token_s": stamp,
                 "engine_last_token_s": stamp + 0.1} if engine_times else {}
        records.append(RequestRecord(f"r{i}", sent, sent, 64, 2, 2, first, (first, stamp + 0.101), None,
                                     stamp + 0.101, "ok", **times))
    meta = {"driver": "synthetic", "load": {"mode": mode}, "host_probe": {"summary": {"probe_p50_s": probe_s}}}
    return write_run(path, records, meta)


def test_the_low_quantile_is_the_fixed_path_plus_a_small_share_of_the_step(tmp_path: Path) -> None:
    into, out = frontend.fixed_path_ms(level(tmp_path / "f0.25", 1.78e-3), 5)
    assert INPUT_S * 1e3 < into < (INPUT_S + 0.1 * STEP_S) * 1e3
    assert OUTPUT_S * 1e3 < out < (OUTPUT_S + 0.1e-3) * 1e3
    assert frontend.fixed_path_ms(level(tmp_path / "bare", 1.78e-3, engine_times=False), 5) is None


def test_level_fraction_reads_the_level_name() -> None:
    assert frontend.load_fraction(Path("x/f0.25").name) == 0.25
    assert frontend.load_fraction(Path("x/burst").name) is None
    assert frontend.load_fraction(Path("x/fast").name) is None


def test_each_level_is_taken_to_the_reference_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reference = reference_probe_s()
    level(tmp_path / "a" / "f0.25", reference)
    level(tmp_path / "b" / "f0.25", reference / 2)  # a host twice as fast: its path counts double
    level(tmp_path / "c" / "f0.90", reference)  # above --max-fraction: left out
    level(tmp_path / "d" / "f0.25", reference, mode="closed")  # not a Poisson level: left out
    frontend.main([str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    per_level = [float(line.split("-> ")[1].split(" ms")[0]) for line in lines if "->" in line]
    assert len(per_level) == 2
    assert max(per_level) == pytest.approx(2 * min(per_level), rel=0.01)  # printed to 0.01 ms
    assert lines[-1].startswith("all: 2 levels")


@pytest.mark.parametrize("argv, message", [
    (["--quantile", "0"], "--quantile 0: expected a percentile in"),
    (["--max-fraction", "1.5"], "--max-fraction 1.5: expected a fraction of capacity in"),
])
def test_bad_options_name_the_value(argv: list[str], message: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        frontend.main([str(tmp_path), *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_an_empty_folder_or_no_usable_level_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="holds no measurement"):
        frontend.main([str(tmp_path)])
    level(tmp_path / "x" / "f0.90", 1.78e-3)
    with pytest.raises(SystemExit, match=r"no probed Poisson level with engine times at or below 0\.5"):
        frontend.main([str(tmp_path)])


@pytest.mark.parametrize("argv, message", [
    (["--group", "h100"], "--group 'h100': expected DEVICE=REGEX"),
    (["--group", "=x"], "--group '=x': expected DEVICE=REGEX"),
    (["--free", "frontend_s,warp"], "choose one or more of"),
    (["--host-speed", "fast"], "--host-speed 'fast'"),
])
def test_stability_options_name_the_bad_value(argv: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        stability.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_stability_groups_default_to_the_probed_8b_starts() -> None:
    args = stability.parse_args([])
    assert [device for device, _ in args.group] == ["h200"] + ["h100"] * 5
    assert args.free == ("gpu_scale", "eager_layer_s")


def test_a_group_matching_no_level_is_a_clear_error(tmp_path: Path) -> None:
    level(tmp_path / "s" / "f0.25", 1.78e-3)
    with pytest.raises(SystemExit, match="matches 'nothing-here'"):
        stability.group_replays(tmp_path, "h200", "nothing-here", "calibrated", "probe")
