"""``latsim predict`` on quantized checkpoints: dtypes and sources in the output, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latsim.catalog import model_config_dict
from tests.cli_runner import run_cli as run

FIXTURES = json.loads((Path(__file__).parent / "quant_configs.json").read_text())
SMALL = ["--num-requests", "40", "--qps", "4", "--device", "h200", "--json"]




def checkpoint(tmp_path: Path, quant: str | None, model_type: str = "llama") -> str:
    cfg = model_config_dict("llama-3.1-8b")
    cfg["model_type"] = model_type
    if quant:
        cfg["quantization_config"] = FIXTURES[quant]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_predict_reports_the_config_dtype_and_a_flag_override(tmp_path, monkeypatch, capsys) -> None:
    path = checkpoint(tmp_path, "modelopt_fp8_kv")
    code, out, _ = run(["predict", "--model", path, *SMALL], monkeypatch, capsys)
    assert code == 0
    summary = json.loads(out)
    assert (summary["weight_dtype"], summary["weight_dtype_source"]) == ("fp8", "config")
    assert (summary["kv_dtype"], summary["kv_dtype_source"]) == ("fp8", "config")
    assert summary["quantization"]["method"] == "modelopt"
    code, out, _ = run(["predict", "--model", path, "--weight-dtype", "bf16", *SMALL], monkeypatch, capsys)
    flagged = json.loads(out)
    assert (flagged["weight_dtype"], flagged["weight_dtype_source"]) == ("bf16", "flag")
    assert flagged["kv_capacity_tokens"] < summary["kv_capacity_tokens"]


@pytest.mark.parametrize(("quant", "model_type", "needle"), [
    ("reject_hqq", "llama", "quantization_config method 'hqq' is not modelled; known methods:"),
    (None, "mamba", "model_type 'mamba' is a state-space (Mamba) architecture"),
])
def test_bad_checkpoints_exit_2_with_one_line(tmp_path, monkeypatch, capsys, quant, model_type, needle) -> None:
    path = checkpoint(tmp_path, quant, model_type)
    code, out, err = run(["predict", "--model", path, *SMALL], monkeypatch, capsys)
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1


def test_weight_dtype_flag_overrides_an_unmodelled_method(tmp_path, monkeypatch, capsys) -> None:
    path = checkpoint(tmp_path, "reject_hqq")
    code, out, _ = run(["predict", "--model", path, "--weight-dtype", "int4", *SMALL], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["weight_dtype_source"] == "flag"


def test_a_bitsandbytes_checkpoint_is_predicted_with_a_warning_and_no_band(tmp_path, monkeypatch, capsys) -> None:
    path = checkpoint(tmp_path, "bnb_nf4")
    code, out, err = run(["predict", "--model", path, *SMALL], monkeypatch, capsys)
    summary = json.loads(out)
    assert code == 0 and summary["weight_dtype"] == "int4"
    band = summary["validated_error"]
    assert band["available"] is False and "no live run measured" in band["why"]
    assert "warning: bitsandbytes 4-bit" in err
    code, out, err = run(["predict", "--model", path, "--weight-dtype", "bf16", *SMALL], monkeypatch, capsys)
    assert code == 0 and "bitsandbytes" not in err  # served at bf16: what was measured
    code, out, err = run(["predict", "--model", path, "--num-requests", "40", "--qps", "4", "--device", "h100",
                          "--json"], monkeypatch, capsys)
    assert code == 0 and "warning: bitsandbytes 4-bit" in err  # the pricing, not only the band, is unmeasured
    assert "bitsandbytes" in json.loads(out)["validated_error"]["why"]  # the H100 has a band, not of 4-bit bnb
