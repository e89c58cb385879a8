"""scripts/device_trace.py: scenario parsing and the reduction of a profiler trace to steps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.script_module import load_script

trace_script = load_script(Path("device_trace.py"))


def _mark(ts: float, name: str = "execute_context_0(0)_generation_2(2)") -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": 5}


def _launch(ts: float, corr: int, name: str = "cudaLaunchKernel", cat: str = "cuda_runtime") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": 2, "args": {"correlation": corr}}


def _kernel(ts: float, dur: float, corr: int, name: str) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"correlation": corr}}


def test_kernels_go_to_the_step_that_launched_them() -> None:
    events = [
        _launch(50, 1), _kernel(60, 9, 1, "before_any_step"),  # dropped: no step yet
        _mark(100), _launch(110, 2), _launch(120, 3, "cudaGraphLaunch"),
        _kernel(130, 40, 2, "void cutlass::device_kernel<Sm90GemmFp8>"),
        # launched in step 0, but runs on the GPU after the next step's mark: still step 0
        _kernel(260, 30, 3, "flash_fwd_splitkv_kernel"),
        _kernel(300, 5, 3, "rms_norm_kernel"),
        {"ph": "X", "cat": "user_annotation", "name": "gpu_model_runner: preprocess", "ts": 240, "dur": 1},
        _mark(250, "execute_context_1(512)_generation_1(1)"), _launch(255, 4),
        _kernel(310, 7, 4, "dynamic_scaled_fp8_quant_kernel"),
        _mark(400), _launch(410, 5), _kernel(420, 100, 5, "ends_after_the_trace"),  # last step: dropped
    ]
    steps, kernels = trace_script.summarize_trace({"traceEvents": events}, "decode:seqs=2,in=8")
    assert [s["step"] for s in steps] == [0, 1]
    first, second = steps
    assert first["gpu_busy_us"] == 75 and first["kernels"] == 3 and first["span_us"] == 175
    assert first["gemm_us"] == 40 and first["attention_us"] == 30 and first["norm_us"] == 5
    assert first["cpu_us"] == 150 and (first["decode_reqs"], first["prefill_tokens"]) == (2, 0)
    assert (second["prefill_reqs"], second["prefill_tokens"], second["decode_tokens"]) == (1, 512, 1)
    assert second["quant_us"] == 7 and second["gemm_us"] == 0
    assert kernels[0]["kernel"].startswith("void cutlass") and kernels[0]["total_us"] == 40
    assert {k["kernel"] for k in kernels}.isdisjoint({"before_any_step", "ends_after_the_trace"})


def test_kernels_launched_through_the_driver_count_in_their_step() -> None:
    """A step without CUDA graphs launches cuBLASLt's GEMMs with ``cuLaunchKernelEx`` and Triton's
    kernels with ``cuLaunchKernel`` (the driver API): they belong to it as the runtime's do."""
    events = [
        _mark(100, "execute_context_1(512)_generation_60(60)"),
        _launch(110, 1), _kernel(130, 50, 1, "void cutlass::device_kernel<flash::FlashAttnFwdSm90>"),
        _launch(115, 2, "cuLaunchKernelEx", "cuda_driver"),
        _kernel(190, 60, 2, "nvjet_sm90_tst_128x64_64x8_2x1_v_bz_TNT"),
        _launch(120, 3, "cuLaunchKernel", "cuda_driver"), _kernel(260, 8, 3, "triton_red_fused_fused_add_rms_norm_0"),
        _launch(125, 4, "cuEventRecord", "cuda_driver"),  # no kernel: ignored
        _mark(400),
    ]
    (step,), _ = trace_script.summarize_trace({"traceEvents": events}, "chunked:in=512,n=1,decodes=60,din=512")
    assert step["kernels"] == 3 and step["gpu_busy_us"] == 118
    assert (step["attention_us"], step["gemm_us"], step["norm_us"]) == (50, 60, 8)


@pytest.mark.parametrize(("name", "cls"), [
    ("void vllm::dynamic_per_token_scaled_fp8_quant_kernel<>", "quant"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<>>", "gemm"),
    ("nvjet_tst_128x64_64x8_1x1_v_bz_TNT", "gemm"),
    ("void flash::flash_fwd_splitkv_combine_kernel", "attention"),
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16>", "norm"),
    ("void vllm::act_and_mul_kernel<silu>", "activation"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "inductor"),
    ("void at::native::elementwise_kernel<128, 4>", "other"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>", "comm"),
])
def test_kernel_classes(name: str, cls: str) -> None:
    assert trace_script.kernel_class(name) == cls


def test_scenarios_parse_and_reject_bad_text() -> None:
    assert trace_script.parse_scenario("decode:seqs=150,in=512") == {
        "kind": "decode", "label": "decode:seqs=150,in=512", "seqs": 150, "in": 512}
    with pytest.raises(ValueError, match="kind must be one of decode, prefill, burst, chunked"):
        trace_script.parse_scenario("stream:n=3")
    with pytest.raises(ValueError, match="missing in"):
        trace_script.parse_scenario("burst:n=3")
    assert trace_script.parse_scenario("burst:in=512,n=32") == {
        "kind": "burst", "label": "burst:in=512,n=32", "in": 512, "n": 32}
    with pytest.raises(ValueError, match="'n=0'; prefill takes in, n as positive integers"):
        trace_script.parse_scenario("prefill:in=5,n=0")
    with pytest.raises(ValueError, match="missing decodes, din"):
        trace_script.parse_scenario("chunked:in=5,n=1")


def test_graphless_scenario_takes_zero_decodes_only() -> None:
    sc = trace_script.parse_scenario("graphless:in=1024,n=20,decodes=0,din=512")
    assert (sc["kind"], sc["decodes"], sc["in"]) == ("graphless", 0, 1024)
    with pytest.raises(ValueError, match="decodes may be 0"):
        trace_script.parse_scenario("graphless:in=0,n=20,decodes=0,din=512")
    with pytest.raises(ValueError, match="positive integers"):
        trace_script.parse_scenario("chunked:in=512,n=2,decodes=0,din=512")


def test_emissions_start_where_the_merged_token_times_jump() -> None:
    client = trace_script.Client(engine=None, vocab=100)
    client.times = {"a": [1.0, 1.010, 1.020], "b": [1.00005, 1.01008, 1.030]}
    got = trace_script.emissions(client, ["a", "b"], 1.005, 1.05)
    assert got == [1.010, 1.020, 1.030]


def test_step_gaps_are_the_times_between_emissions_in_order() -> None:
    """A prompt's step shows as the one long gap among the decoders' steps."""
    client = trace_script.Client(engine=None, vocab=100)
    client.times = {"a": [1.0, 1.008, 1.031, 1.039], "b": [1.00005, 1.00806, 1.03107, 1.03905]}
    got = trace_script.step_gaps(client, ["a", "b"], 0.99, 1.05)
    assert got == pytest.approx([0.008, 0.023, 0.008])
    assert trace_script.step_gaps(client, ["a", "b"], 1.02, 1.035) == []  # one emission: no gap


def test_resummarize_rewrites_the_tables_from_the_kept_traces(tmp_path: Path) -> None:
    import gzip
    import json

    events = [_mark(100), _launch(110, 1, "cuLaunchKernelEx", "cuda_driver"), _kernel(130, 40, 1, "nvjet_tst_x"),
              _mark(300)]
    (tmp_path / "torch").mkdir()
    with gzip.open(tmp_path / "torch" / "a.pt.trace.json.gz", "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    (tmp_path / "timings.json").write_text(json.dumps({"scenarios": [
        {"scenario": {"label": "decode:seqs=2,in=8"}, "trace": "a.pt.trace.json.gz"},
        {"scenario": {"label": "prefill:in=5,n=1"}, "trace": "missing.json.gz"}]}))
    (tmp_path / "steps.csv").write_text("stale\n")
    assert trace_script.resummarize(tmp_path) == 1
    lines = (tmp_path / "steps.csv").read_text().splitlines()
    assert lines[0].startswith("scenario,step,") and len(lines) == 2 and ",40.0," in lines[1]
    assert "nvjet_tst_x" in (tmp_path / "kernels.csv").read_text()
    assert not list(tmp_path.glob(".*.tmp"))


def test_resummarize_needs_a_trace_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        trace_script.parse_args(["--resummarize", str(tmp_path)])
    assert err.value.code == 2 and "no timings.json there" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        trace_script.parse_args(["--model", "phi-3-mini"])


def test_prefixed_scenario_takes_its_prefix_length() -> None:
    sc = trace_script.parse_scenario("prefixed:in=128,prefix=1024,n=12")
    assert (sc["kind"], sc["in"], sc["prefix"], sc["n"]) == ("prefixed", 128, 1024, 12)
    with pytest.raises(ValueError, match="missing prefix"):
        trace_script.parse_scenario("prefixed:in=128,n=12")
    with pytest.raises(ValueError, match="prefixed takes in, n, prefix as positive integers"):
        trace_script.parse_scenario("prefixed:in=128,prefix=0,n=12")


def test_a_request_s_own_ids_are_one_sequence_per_key() -> None:
    client = trace_script.Client(engine=None, vocab=1000)
    own = client.own_ids("s0-u-p0", 8)
    assert own == client.own_ids("s0-u-p0", 8) and own != client.own_ids("s0-u-p1", 8)
    assert all(10 <= t < 1000 for t in own)


def test_shared_scenario_names_its_prefixes_and_groups() -> None:
    sc = trace_script.parse_scenario("shared:seqs=64,in=512,prefix=1024,groups=4")
    assert (sc["kind"], sc["seqs"], sc["prefix"], sc["groups"]) == ("shared", 64, 1024, 4)
    with pytest.raises(ValueError, match="missing groups"):
        trace_script.parse_scenario("shared:seqs=64,in=512,prefix=1024")


class _BurstEngine:
    """Answers each request with one token after a pause; counts the requests in flight."""

    def __init__(self) -> None:
        self.in_flight = self.most = 0
        self.profiling: list[str] = []

    async def generate(self, prompt: dict[str, list[int]], params: object,
                       request_id: str) -> AsyncIterator[SimpleNamespace]:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        yield SimpleNamespace(outputs=[SimpleNamespace(token_ids=[7])], finished=True)

    async def start_profile(self) -> None:
        self.profiling.append("start")

    async def stop_profile(self) -> None:
        self.profiling.append("stop")


def test_a_burst_sends_its_prompts_at_once_then_again_profiled(monkeypatch: pytest.MonkeyPatch) -> None:
    import latsim.measure.vllm_driver as driver

    monkeypatch.setattr(driver, "vllm_sampling_params", lambda n: {"max_tokens": n})
    engine = _BurstEngine()
    client = trace_script.Client(engine, vocab=1000)
    sc = trace_script.parse_scenario("burst:in=64,n=12")
    res = asyncio.run(trace_script.burst(engine, client, sc, "s0"))
    assert engine.most == 12 and engine.profiling == ["start", "stop"]
    assert len(res["ttft_ms"]) == len(res["ttft_profiled_ms"]) == 12
    assert all(0.0 < t <= res["burst_ms"] for t in res["ttft_ms"])
    assert {len(client.own_ids(r, 64)) for r in client.times} == {64} and len(client.times) == 24
