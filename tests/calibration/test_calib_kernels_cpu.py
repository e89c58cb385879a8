"""Kernel options that need the GPU path are skipped with a reason on the CPU backend, and the
work of a windowed or fp8-KV attention call counts what the kernel reads."""

from __future__ import annotations

import pytest

from latsim.calibration import attention, gemm
from latsim.calibration.context import Skip

torch = pytest.importorskip("torch")


@pytest.fixture()
def cpu():
    from latsim.calibration.context import make_context

    return make_context("cpu")


def test_int4_gemm_needs_marlin_on_a_gpu(cpu) -> None:
    with pytest.raises(Skip, match="int4 needs vLLM's Marlin kernel"):
        gemm.run(cpu, {"M": 8, "K": 256, "N": 128, "dtype": "int4"})


def test_unknown_gemm_dtype_is_named(cpu) -> None:
    with pytest.raises(ValueError, match=r"gemm dtype='int3'; accepted: bf16, fp8, int4"):
        gemm.run(cpu, {"M": 8, "K": 256, "N": 128, "dtype": "int3"})


@pytest.mark.parametrize("extra", [{"kv": "fp8"}, {"window": 64}])
def test_fp8_kv_and_windows_run_only_on_the_paged_fa3_path(cpu, extra) -> None:
    point = {"phase": "decode", "hq": 4, "hkv": 2, "d": 32, "batch": 2, "ctx": 16, "mix": "uniform", **extra}
    with pytest.raises(Skip, match="run only on vLLM's paged FA3 path"):
        attention.run(cpu, point)


def test_unknown_kv_dtype_is_named(cpu) -> None:
    with pytest.raises(ValueError, match=r"kv='int4'; accepted: bf16, fp8"):
        attention.run(cpu, {"phase": "decode", "hq": 4, "hkv": 2, "d": 32, "batch": 1, "ctx": 8, "mix": "uniform",
                            "kv": "int4"})


def test_window_caps_reads_and_pairs() -> None:
    """A query attends to itself and the window - 1 tokens before it."""
    assert attention.windowed([100, 5], [1, 1], 0) == ([100, 5], 105.0)
    assert attention.windowed([100, 5], [1, 1], 10) == ([10, 5], 15.0)
    reads, pairs = attention.windowed([300], [200], 64)
    assert reads == [263] and pairs == 200 * 64
    brute = sum(min(p + 1, 50) for p in range(30, 130))
    assert attention.windowed([130], [100], 50)[1] == brute
    assert attention.windowed([130], [100], 0)[1] == attention.prefill_pairs(100, 30)


def test_fp8_kv_halves_the_cache_bytes() -> None:
    _, bf16 = attention.work(8, 2, 64, 1, 1000.0, 1000, "bf16")
    _, fp8 = attention.work(8, 2, 64, 1, 1000.0, 1000, "fp8")
    assert fp8 < 0.51 * bf16 + 8 * 64 * 3
