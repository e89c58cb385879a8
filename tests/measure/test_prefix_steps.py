"""scripts/prefix_steps.py: prompts that hit the prefix cache, priced beside cold ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script_module import load_script

ps = load_script(Path("prefix_steps.py"))


def test_a_hit_computes_its_own_tokens_and_the_prefix_tail_after_the_cached_blocks() -> None:
    shape = ps.step_shape({"kind": "prefixed", "in": 100, "prefix": 1000, "n": 4}, 16)
    assert shape.prefill_tokens == 100 + 1000 - 992  # 62 full blocks of the prefix cached
    assert shape.prefill_kv_tokens == 1100
    cold = ps.step_shape({"kind": "prefill", "in": 512, "n": 4}, 16)
    assert (cold.prefill_tokens, cold.prefill_kv_tokens) == (512, 512)


def _run(folder: Path, measured_ms: float) -> Path:
    folder.mkdir()
    scenarios = [{"scenario": {"kind": "prefixed", "label": "prefixed:in=128,prefix=4096,n=2", "in": 128,
                               "prefix": 4096, "n": 2}, "ttft_ms": [measured_ms, measured_ms]},
                 {"scenario": {"kind": "prefill", "label": "prefill:in=128,n=2", "in": 128, "n": 2},
                  "ttft_ms": [measured_ms, measured_ms], "host_speed_before": {"host_speed": 0.5},
                  "host_speed_after": {"host_speed": 0.5}},
                 {"scenario": {"kind": "decode", "label": "decode:seqs=4,in=512", "seqs": 4, "in": 512}}]
    meta = {"argv": ["device_trace.py", "--model", "llama-3.1-8b"], "scenarios": scenarios,
            "engine_config": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}}
    (folder / "timings.json").write_text(json.dumps(meta))
    return folder


def test_a_hit_costs_the_model_its_attention_over_the_cached_context(tmp_path: Path) -> None:
    hit, cold = ps.folder_rows(_run(tmp_path / "run", 30.0), "h200", 16)
    assert (hit["new"], hit["cached"], cold["cached"]) == (128, 4096, 0)
    assert hit["model_gpu_ms"] > cold["model_gpu_ms"]  # the same new tokens, attending to 4,096 more
    assert hit["ttft_ratio"] == pytest.approx(hit["model_ttft_ms"] / 30.0)
    assert cold["host_speed"] == 0.5 and hit["host_speed"] == 1.0
    assert hit["steps"] == 0 and hit["gpu_ms"] != hit["gpu_ms"]  # no profile kept: NaN


def test_a_folder_without_timings_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ps.main([str(tmp_path)]) == 2
    assert "timings.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        ps.main([str(tmp_path), "--block", "0"])
    assert exited.value.code == 2
    assert "--block 0: expected a whole number >= 1" in capsys.readouterr().err
