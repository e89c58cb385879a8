"""scripts/fit_memory.py: the shipped memory coefficients are what the fit writes, and the
profiling peak is the larger of the forward and the sampler, as the memory probes measured."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from latsim.catalog.lookup import load_model
from latsim.deployment import EngineConfig
from latsim.engines.vllm.memory import activation_peak_bytes, runs_on_v1_runner
from latsim.paths import engine_data
from tests.script_module import load_script

GIB = 2**30


@pytest.fixture(scope="module")
def fit_memory():
    return load_script(Path("fit_memory.py"))


@pytest.fixture(scope="module")
def starts(fit_memory):
    return fit_memory.live_starts() + fit_memory.probe_starts()


def test_the_shipped_coefficients_are_the_fits(fit_memory, starts):
    shipped = yaml.safe_load(engine_data("vllm", "memory.yaml").read_text())
    refit = fit_memory.fit(starts)
    for key in fit_memory.FITTED:
        assert shipped[key] == pytest.approx(refit[key], rel=1e-3), key
    assert len(shipped["provenance"]["starts"]) == len(starts)


def test_every_fitted_start_within_a_fifth_of_a_percent_of_its_kv_cache(fit_memory, starts):
    """Every fitted and held-out start within 0.2 % of its KV cache but the known misses: Gemma-3-27B
    (its vision tower counted apart) left out, Gemma-2-9B (held out; the first with a 256k
    vocabulary on the V2 runner besides it) within 0.5 %: it reads -0.43 %, 0.23 GiB more
    predicted besides the KV cache (``data/memory/README.md``)."""
    coefficients = fit_memory.fit(starts)
    fitted = [row for row in fit_memory.report(starts, coefficients) if row["role"] in ("fit", "held out")]
    bound = {"gemma-2-9b": 0.5}
    worst = [row for row in fitted if row["model"] != "gemma-3-27b"
             and abs(row["kv_capacity_error_pct"]) > bound.get(row["model"], 0.2)]
    assert len(fitted) >= 20 and not worst


def test_the_fit_leaves_out_what_it_does_not_model(fit_memory, starts):
    roles = {s.role for s in starts}
    assert {"fit", "held out", "quantized", "MoE, V1 runner", "held out, V1 runner", "tp"} <= roles
    assert all(s.deployment.device.name == "h100" or s.source.startswith(fit_memory.HELD_OUT_SOURCES)
               for s in starts if s.role == "held out")


def test_a_second_v1_runner_moe_is_held_out_and_planned_within_a_percent(fit_memory, starts):
    """Mixtral-8x7B's two H200 probes (token budgets 2,048 and 8,192) are not fitted: the V1 runner's
    terms fitted on Qwen3-30B-A3B and the workspace carry to them within 1 % of the KV cache."""
    rows = [r for r in fit_memory.report(starts, fit_memory.fit(starts)) if r["model"] == "mixtral-8x7b"]
    assert len(rows) == 2 and {r["role"] for r in rows} == {"held out, V1 runner"}
    assert {r["gpu"] for r in rows} == {"h200"}
    assert all(abs(r["kv_capacity_error_pct"]) < 1.0 for r in rows)


def test_a_probe_folder_names_its_gpu(fit_memory):
    assert fit_memory.probe_gpu("s40-mixtral-h200") == "h200"
    assert fit_memory.probe_gpu("s39-tokens") == fit_memory.PROBE_GPU == "h100"


def test_a_probe_log_takes_the_gpu_its_row_recorded_before_its_folders(fit_memory, tmp_path):
    folder = tmp_path / "s41-probes"  # no GPU in the folder's name: the default would be the H100
    folder.mkdir()
    rows = [{"name": "llama-3.1-8b-v32768-t4096-s1024", "gpu_name": "NVIDIA H200"},
            {"name": "llama-3.1-8b-v32768-t8192-s1024"}]
    (folder / "memory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert fit_memory.probe_device(folder / "llama-3.1-8b-v32768-t4096-s1024.log.gz") == "h200"
    assert fit_memory.probe_device(folder / "llama-3.1-8b-v32768-t8192-s1024.log.gz") == "h100"


def test_the_probe_names_a_start_after_its_model_as_the_fit_reads_it(fit_memory):
    probe = load_script(Path("device_memory_probe.py"))
    name = probe.start_name("deepseek-v2-lite", {"vocab": 102400, "tokens": 4096, "seqs": 256})
    assert fit_memory.PROBE_NAME.match(f"{name}.log.gz").group(1) == "deepseek-v2-lite"
    logged = probe.read_log(f"model='/tmp/memcfg/{name}', max_num_batched_tokens=4096")
    assert logged["vocab"] == 102400 and logged["tokens"] == 4096


def _peak(model_name: str, vocab: int, tokens: int, seqs: int = 1024) -> float:
    model = replace(load_model(model_name), vocab_size=vocab)
    engine = EngineConfig(max_num_batched_tokens=tokens, max_num_seqs=seqs)
    return activation_peak_bytes(model, 1, engine) / GIB


def test_the_profiling_peak_is_the_larger_of_forward_and_sampler():
    """A small vocabulary leaves the forward in charge (the peak grows with the token budget);
    a large one sets the peak at a small budget and hides the budget up to the forward's."""
    small = [_peak("llama-3.2-1b", 32_768, t) for t in (4096, 8192, 16384, 32768)]
    assert all(b > a for a, b in itertools.pairwise(small))
    assert small[-1] - small[0] == pytest.approx(2.235 - 0.595, abs=0.1)  # the probes' rise, GiB
    large = [_peak("llama-3.2-1b", 262_144, t) for t in (4096, 8192, 16384)]
    assert large[2] - large[0] < 0.1  # measured 1.83 -> 1.88 GiB other
    assert large[0] > small[0] + 1.0
    assert _peak("llama-3.2-1b", 262_144, 8192, seqs=256) < large[1] - 0.3  # fewer rows: measured -0.51 GiB


def test_a_mixture_of_experts_holds_its_workspace_besides_the_peak():
    dense = _peak("qwen3-30b-a3b", 151_936, 16384) - _peak("qwen3-30b-a3b", 151_936, 4096)
    assert dense * GIB / 12288 == pytest.approx(8 * (2048 + 3 * 768) * 2, rel=0.35)


def test_routed_experts_activations_live_in_the_workspace_alone():
    """Mixtral-8x7B's probes rose 1.03 GiB from a 2,048- to an 8,192-token budget, the workspace's
    slope (2 experts x (4,096 + 3 x 14,336) x 2 B a token = 1.08 GiB); counting its experts' width
    in the forward too planned 2.15 GiB."""
    rise = _peak("mixtral-8x7b", 32_000, 8192) - _peak("mixtral-8x7b", 32_000, 2048)
    assert rise == pytest.approx(1.03, abs=0.1)
    shared = load_model("qwen1.5-moe-a2.7b")  # its always-on shared expert is a dense MLP in the forward
    assert activation_peak_bytes(shared, 1, EngineConfig(max_num_batched_tokens=32768, max_num_seqs=1)) > \
        activation_peak_bytes(replace(shared, shared_expert_intermediate_size=0), 1,
                              EngineConfig(max_num_batched_tokens=32768, max_num_seqs=1))


def test_vllm_runs_most_mixtures_of_experts_on_its_older_runner():
    """vLLM 0.25.1 runs dense models and three MoE architectures on its V2 runner, other MoE models
    on the V1 runner (whose sampler sorts every logit: 14 bytes a logit where V2's takes about 3)."""
    assert runs_on_v1_runner(load_model("qwen3-30b-a3b")) and runs_on_v1_runner(load_model("mixtral-8x7b"))
    assert not runs_on_v1_runner(load_model("qwen1.5-moe-a2.7b"))  # Qwen2MoeForCausalLM
    assert not runs_on_v1_runner(load_model("llama-3.1-8b"))
    v1 = _peak("qwen3-30b-a3b", 151_936, 4096)
    as_v2 = activation_peak_bytes(replace(load_model("qwen3-30b-a3b"), num_experts=0, experts_per_token=0,
                                          moe_intermediate_size=0, num_moe_layers=0, intermediate_size=6144),
                                  1, EngineConfig(max_num_batched_tokens=4096, max_num_seqs=1024)) / GIB
    assert v1 > as_v2 + 1.0
