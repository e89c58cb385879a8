"""4-bit weight-only GEMMs and attention over an fp8 KV cache: fitted as families of their own,
used where a deployment runs those kernels, and checked against the H200's own measurements."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from latsim.calibration.fit import fit_frames
from latsim.catalog import load_device, load_model
from latsim.catalog.quant import QuantSpec
from latsim.costmodel.profile.regressors import load_predictors
from latsim.costmodel.profile.tables import read_shard, shard_path, write_shard
from latsim.costmodel.shard import runs_w4a16_kernel

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "latsim" / "data" / "calibration" / "h200"
KERNELS = ROOT / "data" / "kernels"
SMALL = Path(__file__).parent / "data" / "h200-small"


def test_fit_frames_split_kernels_and_leave_windows_out(tmp_path: Path) -> None:
    folder = tmp_path / "h200"
    shutil.copytree(SMALL, folder)
    att = read_shard(shard_path(folder, "attention"))
    ok = att[att["status"] == "ok"]
    some = pd.concat([ok[ok["phase"] == "prefill"].head(6), ok[ok["phase"] == "decode"].head(6)])
    fp8 = some.assign(kv="fp8", point_id=lambda d: d["point_id"] + ",kv=fp8")
    win = ok.head(8).assign(window=4096, point_id=lambda d: d["point_id"] + ",window=4096")
    write_shard(folder, "attention", pd.concat([att, fp8, win], ignore_index=True).to_dict("records"))
    frames = fit_frames(folder)
    base = pd.concat([frames["attn_prefill"], frames["attn_decode"]])
    assert len(base) == len(ok)
    assert len(frames["attn_prefill_fp8kv"]) == 6 and len(frames["attn_decode_fp8kv"]) == 6
    assert (frames["attn_decode_fp8kv"]["kv"] == "fp8").all()
    assert "gemm_w4a16" not in frames  # the small profile has no int4 rows


def test_shipped_h200_profile_keeps_int4_and_fp8_cache_rows_apart() -> None:
    frames = fit_frames(H200)
    assert set(frames["gemm"]["dtype"]) == {"bf16", "fp8"}
    assert set(frames["gemm_w4a16"]["dtype"]) == {"int4"}
    for fam in ("attn_prefill", "attn_decode"):
        assert frames[fam]["kv"].isna().all()
        assert (frames[f"{fam}_fp8kv"]["kv"] == "fp8").all()


def _measured(table: Path, **where: object) -> float:
    df = pd.read_parquet(table)
    for k, v in where.items():
        df = df[df[k] == v]
    assert len(df) == 1, where
    return float(df["median_s"].iloc[0])


def test_int4_layers_are_priced_from_the_kernel_vllm_runs() -> None:
    """The 70B's gate/up projection at decode batches: the H200 runs Machete there (1.3x Marlin's
    time at a handful of rows); the 4-bit rows (replayed in CUDA graphs, as a decode step runs
    them) price it within 10 %, the bf16 curve on a 4-bit roofline does not."""
    p, dev = load_predictors(H200), load_device("h200")
    m = np.array([8.0, 64.0, 256.0])
    wb = 0.5 + 2.0 / 128
    w4 = p.gemm_s(m, 8192, 57344, dev, "bf16", wb, w4a16=True)
    bf16_curve = p.gemm_s(m, 8192, 57344, dev, "bf16", wb)
    measured = np.array([_measured(KERNELS / "h200-graph-w4-steps" / "gemm.parquet", K=8192, N=57344, M=int(x))
                         for x in m])
    assert np.all(np.abs(w4 / measured - 1) < 0.10), w4 / measured
    assert np.max(np.abs(bf16_curve / measured - 1)) > 0.25


def test_fp8_cache_decode_is_priced_from_its_own_rows() -> None:
    """FA3 decode over an fp8 cache is not twice as fast as over bf16 (0.77x at large KV on the
    H200): the fp8-cache rows price it within 10 %."""
    p, dev = load_predictors(H200), load_device("h200")
    batch, ctx = np.array([64.0]), np.array([8192.0])
    fp8 = p.attn_decode_s(batch, ctx, (32, 8, 128), 1.0, dev)
    bf16 = p.attn_decode_s(batch, ctx, (32, 8, 128), 2.0, dev)
    measured = _measured(KERNELS / "h200-fp8-kv" / "attention.parquet", phase="decode", hq=32, hkv=8, d=128,
                         batch=64, ctx=8192)
    assert abs(fp8[0] / measured - 1) < 0.10
    assert 0.6 < fp8[0] / bf16[0] < 0.95


def test_profiles_without_the_variants_fall_back(fitted_profile: Path) -> None:
    p, dev = load_predictors(fitted_profile), load_device("h200")
    m = np.array([8.0, 512.0])
    assert np.array_equal(p.gemm_s(m, 4096, 4096, dev, "bf16", 0.5, w4a16=True),
                          p.gemm_s(m, 4096, 4096, dev, "bf16", 0.5))
    b, c = np.array([32.0]), np.array([2048.0])
    assert "attn_decode_fp8kv" not in p.boosters
    one = p.attn_decode_s(b, c, (32, 8, 128), 1.0, dev)
    assert np.isfinite(one).all()


@pytest.mark.parametrize(("method", "dtype", "expected"), [
    ("gptq", "int4", True), ("awq", "int4", True), ("compressed-tensors", "int4", True),
    ("bitsandbytes", "int4", False), ("fp8", "fp8", False),
])
def test_which_checkpoints_run_a_4bit_gemm_kernel(method: str, dtype: str, expected: bool) -> None:
    from dataclasses import replace

    model = replace(load_model("llama-3.1-8b"), quantization=QuantSpec(method, dtype, 0.53))
    assert runs_w4a16_kernel(model, dtype) is expected
    assert runs_w4a16_kernel(load_model("llama-3.1-8b"), "int4")  # --weight-dtype int4 on a 16-bit checkpoint
    assert not runs_w4a16_kernel(load_model("llama-3.1-8b"), "bf16")
