"""scripts/prefill_batch_check.py: a batch probe's calls against today's price and the n-x-heads rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script_module import load_script

check = load_script(Path("prefill_batch_check.py"))


def probe_file(path: Path) -> Path:
    rows = [{"shape": "few", "hq": 16, "hkv": 8, "d": 256, "q": 512, "ctx": 0, "n": n,
             "alone_us": 33.0, "batched_us": 33.0 if n == 1 else 33.0 + 12.0 * n} for n in (1, 2, 4)]
    path.write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "rows": rows}))
    return path


def test_prices_beside_the_measured_call(tmp_path: Path) -> None:
    frame = check.read_probe(probe_file(tmp_path / "p.json"))
    from latsim.catalog.lookup import load_device
    from latsim.costmodel.profile.regressors import load_predictors
    from latsim.costmodel.profile.store import has_profile

    device = load_device("h100")
    table = check.prices(frame, load_predictors(has_profile(device.name, device.aliases)), device)
    one, four = table[table.n == 1].iloc[0], table[table.n == 4].iloc[0]
    assert four.sum_us == pytest.approx(4 * 33.0)
    assert four.sum_ratio == pytest.approx(4 * 33.0 / (33.0 + 48.0))
    assert one.heads_us == pytest.approx(one.priced_us)  # one chunk: both rules are the profile's price
    assert four.priced_us == pytest.approx(4 * one.priced_us)
    assert four.heads_us < four.priced_us  # more heads fill the GPU: cheaper than four lone calls


def test_the_report_prints_medians_per_shape_and_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check.main([str(probe_file(tmp_path / "p.json")), "--device", "h100"])
    out = capsys.readouterr().out
    assert "median price / measured per shape and count" in out and "heads_ratio" in out


@pytest.mark.parametrize("content, message", [
    ("not json", "not a readable JSON file"),
    (json.dumps({"rows": []}), "no 'rows'"),
    (json.dumps({"rows": [{"shape": "x", "q": 1}]}), "rows lack hq, hkv, d, ctx, n, alone_us, batched_us"),
])
def test_a_file_that_is_not_a_batch_probe_is_a_clear_error(content: str, message: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(SystemExit) as exc:
        check.main([str(bad)])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_an_unknown_device_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        check.main([str(probe_file(tmp_path / "p.json")), "--device", "h999"])
    assert exc.value.code == 2 and "h999" in capsys.readouterr().err
