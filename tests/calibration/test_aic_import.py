"""Importing an AIConfigurator-format database: conversion, provenance, and one-line errors.

Every database here is a small fake written into a tmp folder in the published layout
(``<system>/<op>/vllm/<version>/<table>.parquet``); nothing is fetched.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from latsim.calibration.aic_import import (
    SPREAD_KERNEL,
    SPREAD_NONE,
    SPREAD_TRANSFERRED,
    import_profile,
    refit_imported,
    transfer_spread,
)
from latsim.calibration.aic_source import load_source
from latsim.catalog import load_device, load_model
from latsim.cli import main
from latsim.costmodel.batch import BatchShape
from latsim.costmodel.calibrated import load_calibrated
from latsim.costmodel.profile.store import shipped_profile_dir
from latsim.costmodel.spread import SPREAD_FILE

SUB = "aic-core/src/aiconfigurator_core/systems/data"
GPU = "NVIDIA H100 80GB HBM3"


def _head(n: int) -> dict[str, object]:
    return {"framework": ["VLLM"] * n, "version": ["0.24.0"] * n, "device": [GPU] * n}


def _tables(rng: np.random.Generator) -> dict[tuple[str, str], pd.DataFrame]:
    """Fake tables: latencies (ms) that grow with the work, with a little noise, slower than an H100's roofline."""
    mk = [(m, k, n) for m in (1, 8, 64, 512, 4096) for k in (1024, 4096) for n in (2048, 8192)]
    gemm = pd.DataFrame(
        {
            **_head(2 * len(mk)),
            "kernel_source": ["lin"] * len(mk) + ["fp8k"] * len(mk),
            "gemm_dtype": ["bfloat16"] * len(mk) + ["fp8"] * len(mk),
            "m": [r[0] for r in mk] * 2,
            "n": [r[2] for r in mk] * 2,
            "k": [r[1] for r in mk] * 2,
        }
    )
    work = 4e-12 * gemm.m * gemm.n * gemm.k + 1e-9 * gemm.k * gemm.n
    gemm["latency"] = 0.004 + work * rng.uniform(1.0, 1.1, len(gemm))
    heads = [(32, 8, 128), (16, 16, 64), (8, 1, 128)]
    ctx = [(isl, b, *h) for isl in (16, 128, 1024, 4096) for b in (1, 4) for h in heads]
    context = pd.DataFrame(
        {
            **_head(len(ctx)),
            "kernel_source": "fa3",
            "batch_size": [c[1] for c in ctx],
            "isl": [c[0] for c in ctx],
            "num_heads": [c[2] for c in ctx],
            "num_key_value_heads": [c[3] for c in ctx],
            "head_dim": [c[4] for c in ctx],
            "kv_cache_dtype": "bfloat16",
            "step": 0,
            "window_size": 0,
        }
    )
    context["latency"] = 0.01 + 1e-9 * context.batch_size * context.isl**2 * context.num_heads * context.head_dim / 64
    gen = [(b, s, *h) for b in (1, 8, 64) for s in (127, 1023, 8191) for h in heads]
    generation = pd.DataFrame(
        {
            **_head(len(gen)),
            "kernel_source": "fa3",
            "batch_size": [g[0] for g in gen],
            "isl": 1,
            "step": [g[1] for g in gen],
            "num_heads": [g[2] for g in gen],
            "num_key_value_heads": [g[3] for g in gen],
            "head_dim": [g[4] for g in gen],
            "kv_cache_dtype": "bfloat16",
            "window_size": 0,
        }
    )
    generation["latency"] = 0.008 + 4e-9 * generation.batch_size * generation.step * generation.num_key_value_heads * 64
    toks = [1, 4, 16, 64, 256, 1024]
    moe_rows = [(t, e, k) for t in toks for e, k in ((8, 2), (64, 8))]
    moe = pd.DataFrame(
        {
            **_head(len(moe_rows)),
            "kernel_source": "vllm_triton",
            "moe_dtype": "bfloat16",
            "num_tokens": [r[0] for r in moe_rows],
            "hidden_size": 2048,
            "inter_size": 1024,
            "topk": [r[2] for r in moe_rows],
            "num_experts": [r[1] for r in moe_rows],
            "moe_tp_size": 1,
            "moe_ep_size": 1,
            "distribution": "balanced",
        }
    )
    moe["latency"] = 0.02 + 1e-4 * moe.num_tokens * moe.topk
    sizes = [2**i for i in range(7, 25, 2)]
    comm = pd.DataFrame(
        {
            **_head(2 * len(sizes)),
            "kernel_source": ["vLLM_custom_graph"] * len(sizes) + ["vLLM_custom_eager"] * len(sizes),
            "allreduce_dtype": "bfloat16",
            "num_gpus": 2,
            "message_size": sizes * 2,
            "backend": ["vllm_graph"] * len(sizes) + ["vllm_eager"] * len(sizes),
        }
    )
    comm["latency"] = 0.005 + 1e-9 * comm.message_size
    return {
        ("gemm", "gemm_perf"): gemm,
        ("attention", "context_attention_perf"): context,
        ("attention", "generation_attention_perf"): generation,
        ("moe", "moe_perf"): moe,
        ("comm", "custom_allreduce_perf"): comm,
    }


def make_db(
    root: Path,
    system: str = "h100_sxm",
    version: str = "0.24.0",
    drop: tuple[str, ...] = (),
    rename: dict[str, str] | None = None,
) -> Path:
    """A fake database under ``root`` (the repository layout); ``drop`` leaves tables out."""
    for (op, stem), df in _tables(np.random.default_rng(0)).items():
        if stem in drop:
            continue
        folder = root / SUB / system / op / "vllm" / version
        folder.mkdir(parents=True, exist_ok=True)
        df.rename(columns=rename or {}).to_parquet(folder / f"{stem}.parquet", index=False)
    return root


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("aic")
    out = base / "h100"
    import_profile("aiconfigurator", make_db(base / "src"), load_device("h100"), out)
    return out


def test_import_writes_tables_in_seconds_with_provenance(imported: Path) -> None:
    prof = json.loads((imported / "profile.json").read_text())
    src = prof["source"]
    assert (src["kind"], src["repository"], src["license"], src["engine"], src["engine_version"]) == (
        "imported",
        "ai-dynamo/aiconfigurator",
        "Apache-2.0",
        "vllm",
        "0.24.0",
    )
    assert prof["gpu_name"] == GPU and prof["device"] == "h100"
    assert src["tables"]["gemm"] == "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
    assert "memory" in prof["not_measured"] and "overhead" in prof["not_measured"]
    assert "gemm_harness" in prof["adjustments"]  # the H100 is the H200's chip: latsim.calibration.aic_bias
    fake = _tables(np.random.default_rng(0))[("moe", "moe_perf")]
    moe = pd.read_parquet(imported / "moe.parquet")
    row = moe[(moe.tokens == 64) & (moe.experts == 8)].iloc[0]
    src_ms = fake[(fake.num_tokens == 64) & (fake.num_experts == 8)]["latency"].iloc[0]
    assert row["median_s"] == pytest.approx(src_ms * 1e-3)
    att = pd.read_parquet(imported / "attention.parquet")
    dec = att[(att.phase == "decode") & (att.batch == 8) & (att.hq == 32)]
    assert set(dec["ctx"]) == {128.0, 1024.0, 8192.0}
    pre = att[att.phase == "prefill"]
    assert len(pre) == 4 * 3  # smallest batch per shape only
    ar = json.loads((imported / "allreduce.json").read_text())
    assert set(ar["worlds"]) == {"2"} and set(ar["modes"]["vllm_custom"]) == {"2"}
    assert ar["worlds"]["2"]["bytes"][0] == 256.0  # 128 bf16 elements


def test_imported_profile_prices_steps_and_says_so(imported: Path) -> None:
    cm = load_calibrated(load_model("llama-3.1-8b"), load_device("h100"), profile=imported)
    small = cm.step_time(BatchShape(prefill_tokens=0, prefill_seqs=0, decode_seqs=8, decode_kv_tokens=8 * 1000))
    large = cm.step_time(
        BatchShape(prefill_tokens=4096, prefill_seqs=1, prefill_attn_pairs=4096 * 4097 / 2, prefill_kv_tokens=4096)
    )
    assert 0 < small < large
    assert cm.label.startswith("calibrated (imported")
    assert "imported from ai-dynamo/aiconfigurator" in cm.describe()["source"]["origin"]  # type: ignore[index]
    assert "engine modelled is 0.25.1" in cm.describe()["source"]["origin"]  # type: ignore[index]


def _err(tmp_path: Path, **kw: object) -> str:
    with pytest.raises(ValueError) as exc:
        load_source(tmp_path / "src", **kw)  # type: ignore[arg-type]
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_unknown_layout(tmp_path: Path) -> None:
    (tmp_path / "src" / "something").mkdir(parents=True)
    assert "unknown database layout" in _err(tmp_path, device="h100")


def test_unknown_columns(tmp_path: Path) -> None:
    make_db(tmp_path / "src", rename={"latency": "time_ms"})
    msg = _err(tmp_path, device="h100")
    assert "unknown columns" in msg and "latency" in msg


def test_gpu_absent(tmp_path: Path) -> None:
    make_db(tmp_path / "src")
    msg = _err(tmp_path, device="b200")
    assert "b200" in msg and "h100_sxm" in msg


def test_gpu_without_a_system(tmp_path: Path) -> None:
    make_db(tmp_path / "src")
    assert "no aiconfigurator system" in _err(tmp_path, device="mi300x")


def test_version_absent(tmp_path: Path) -> None:
    make_db(tmp_path / "src")
    msg = _err(tmp_path, device="h100", version="0.9.0")
    assert "0.9.0" in msg and "0.24.0" in msg


def test_newest_version_is_taken(tmp_path: Path) -> None:
    make_db(tmp_path / "src", version="0.14.0")
    make_db(tmp_path / "src", version="0.19.0")
    assert load_source(tmp_path / "src", "h100").version == "0.19.0"


def test_partial_database_names_what_is_missing_and_the_fallback(tmp_path: Path) -> None:
    make_db(tmp_path / "src", drop=("moe_perf",))
    msg = _err(tmp_path, device="h100")
    assert "moe_perf missing" in msg and "roofline" in msg and "--allow-partial" in msg
    db = load_source(tmp_path / "src", "h100", allow_partial=True)
    assert db.missing == ["moe"]


def test_required_table_missing(tmp_path: Path) -> None:
    make_db(tmp_path / "src", drop=("generation_attention_perf",))
    msg = _err(tmp_path, device="h100", allow_partial=True)
    assert "lacks required" in msg and "generation_attention_perf" in msg


def test_reuse_yaml_borrows_a_table_from_another_version(tmp_path: Path) -> None:
    make_db(tmp_path / "src", version="0.14.0")
    make_db(tmp_path / "src", version="0.19.0", drop=("moe_perf",))
    (tmp_path / "src" / SUB / "h100_sxm/moe/vllm/0.19.0").mkdir(parents=True)
    (tmp_path / "src" / SUB / "h100_sxm/moe/vllm/0.19.0/reuse.yaml").write_text(
        "reuse:\n- table: moe_perf\n  from_version: 0.14.0\n"
    )
    db = load_source(tmp_path / "src", "h100")
    assert db.reused == {"moe": "0.14.0"} and not db.missing


def test_cli_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_db(tmp_path / "src")
    measured = tmp_path / "measured"
    measured.mkdir()
    (measured / "profile.json").write_text(json.dumps({"device": "h100", "backend": "cuda"}))
    out = str(tmp_path / "out")
    for argv, needle in (
        (["--import", "aiconfigurator", str(tmp_path / "src"), "--device", "a100", "--out", out], "absent"),
        (["--import", "other", str(tmp_path / "src"), "--device", "h100", "--out", out], "accepted: aiconfigurator"),
        (["--import", "aiconfigurator", str(tmp_path / "src"), "--out", out], "needs --device"),
        (["--import", "aiconfigurator", str(tmp_path / "src"), "--device", "h100", "--out", str(measured)],
         "measured here"),
    ):
        monkeypatch.setattr(sys, "argv", ["latsim", "calibrate", *argv])
        with pytest.raises(SystemExit) as exc:
            main()
        err = capsys.readouterr().err
        assert exc.value.code == 2 and needle in err and err.count("\n") == 1


class _FlatModel:
    """A memory-op model predicting efficiency 1 (log ratio 0) everywhere."""

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.zeros(len(x))


def test_kv_write_is_taken_out_at_latsims_own_price_never_below_half() -> None:
    from latsim.calibration.aic_adjust import less_kv_write

    dev = load_device("h100")
    att = pd.DataFrame({"phase": ["prefill", "decode", "decode"], "q": [1024.0, np.nan, np.nan],
                        "batch": [np.nan, 8.0, 8.0], "hkv": [8.0, 8.0, 8.0], "d": [128.0, 128.0, 128.0],
                        "median_s": [1e-3, 2e-5, 1e-6]})
    out = less_kv_write(att, _FlatModel(), dev, per_kernel_s=1e-6)
    kv = np.array([1024.0, 8.0, 8.0]) * 2 * 8 * 128 * 4 / dev.hbm_bandwidth + 1e-6
    assert out["kv_write_s"].to_numpy() == pytest.approx(kv)
    assert out["median_s"].to_numpy()[:2] == pytest.approx(att["median_s"].to_numpy()[:2] - kv[:2])
    assert out["median_s"].iloc[2] == pytest.approx(0.5e-6)  # floor: half the source's time
    assert (out["source_median_s"] == att["median_s"]).all()


def test_imported_attention_rows_keep_the_source_time(imported: Path) -> None:
    att = pd.read_parquet(imported / "attention.parquet")
    assert (att["median_s"] < att["source_median_s"]).all()
    assert (att["median_s"] >= 0.5 * att["source_median_s"] - 1e-15).all()
    assert "attention" in json.loads((imported / "profile.json").read_text())["adjustments"]


def test_rows_faster_than_the_roofline_are_left_out_and_counted(tmp_path: Path) -> None:
    from latsim.calibration.aic_adjust import faster_than_roofline

    dev = load_device("h100")
    flops, nbytes = 2.0 * 4096**3, 3.0 * 4096**2 * 2
    roof = max(flops / dev.flops_for("bf16"), nbytes / dev.hbm_bandwidth)
    df = pd.DataFrame({"dtype": ["bf16", "bf16"], "flops": [flops] * 2, "bytes": [nbytes] * 2,
                       "median_s": [0.5 * roof, 1.5 * roof]})
    assert faster_than_roofline("gemm", df, dev).tolist() == [True, False]
    fake = make_db(tmp_path / "src")
    gemm_file = fake / SUB / "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
    g = pd.read_parquet(gemm_file)
    g.loc[g.index[-1], "latency"] = 1e-6  # far below any roofline
    g.to_parquet(gemm_file, index=False)
    import_profile("aiconfigurator", fake, dev, tmp_path / "out")
    prof = json.loads((tmp_path / "out" / "profile.json").read_text())
    assert prof["adjustments"]["faster_than_roofline_dropped"]["gemm"] >= 1
    assert pd.read_parquet(tmp_path / "out" / "gemm.parquet")["median_s"].min() > 1e-9


def test_refit_imported_touches_only_the_named_family(imported: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(imported, folder)
    before = {p.name: p.read_bytes() for p in folder.glob("model_*.json")}
    report = refit_imported(folder, load_device("h100"), ("gemm",))
    after = {p.name: p.read_bytes() for p in folder.glob("model_*.json")}
    assert {n for n in before if before[n] != after[n]} <= {"model_gemm.json"}
    assert report["imported"]["xgb_params"] and report["families"]["gemm"]["n_test"] > 0
    with pytest.raises(ValueError, match="no 'comm' table"):
        refit_imported(folder, load_device("h100"), ("comm",))


def test_fit_only_on_an_imported_profile_reproduces_the_import(imported: Path, tmp_path: Path) -> None:
    from rich.console import Console

    from latsim.calibration.cli import calibrate_command

    folder = tmp_path / "copy"
    shutil.copytree(imported, folder)
    before = {p.name: p.read_bytes() for p in folder.glob("model_*.json")}
    calibrate_command(device="h100", fit_only=True, profile=folder, console=Console(quiet=True))
    assert {p.name: p.read_bytes() for p in folder.glob("model_*.json")} == before  # import's params, memory kept


def test_spread_table_is_transferred_only_with_the_decode_kernel_it_was_probed_on(
    imported: Path, tmp_path: Path
) -> None:
    prof = json.loads((imported / "profile.json").read_text())
    assert prof["selection"]["attention"]["decode"] != SPREAD_KERNEL  # the fake source's kernel is another
    assert not (imported / SPREAD_FILE).exists() and prof["not_measured"]["decode_spread"] == SPREAD_NONE
    folder = tmp_path / "fa3"
    shutil.copytree(imported, folder)
    prof["selection"]["attention"]["decode"] = SPREAD_KERNEL
    assert transfer_spread(folder, prof) == SPREAD_TRANSFERRED
    reference = shipped_profile_dir("h200") / SPREAD_FILE
    written = json.loads((folder / SPREAD_FILE).read_text())
    assert written["transferred"]["sha256"] == hashlib.sha256(reference.read_bytes()).hexdigest()
    assert written["tables"] == json.loads(reference.read_text())["tables"]
    cm = load_calibrated(load_model("llama-3.1-8b"), load_device("h100"), profile=folder)
    assert cm.describe()["decode_spread"]["source"] == str(folder / SPREAD_FILE)  # type: ignore[index]
    equal = BatchShape.from_chunks([], [4000] * 32)
    spread = BatchShape.from_chunks([], [1000] * 16 + [7000] * 16)
    assert cm.step_time(spread) > cm.step_time(equal)  # same total context, spread costs more
    prof["selection"]["attention"]["decode"] = "vllm_flash_attn"  # FA2: the table does not describe it
    assert transfer_spread(folder, prof) == SPREAD_NONE and not (folder / SPREAD_FILE).exists()
    plain = load_calibrated(load_model("llama-3.1-8b"), load_device("h100"), profile=folder)
    assert plain.step_time(spread) == pytest.approx(plain.step_time(equal), rel=1e-9)
