"""``latsim calibrate --import aiconfigurator PATH``: a profile from published kernel measurements.

Writes into ``out`` (default: the shipped profile folder of the device) the latsim tables
converted by :mod:`latsim.calibration.aic_convert` (subsampled, seeded, zstd parquet),
``profile.json`` with the source's provenance (:func:`latsim.calibration.aic_source.provenance`)
and what the source lacks with what prices it instead (``not_measured``), then fits the
regressors with :func:`latsim.calibration.fit.fit_profile` (smaller trees: :data:`IMPORT_XGB`).

What the source never has, and how it is priced (each marked in ``profile.json``):

* memory-bound ops (RMSNorm, rotary, SiLU x mul, copies): the efficiency curve fitted on
  latsim's own H200 measurements (``h200/memory.parquet``), applied to this GPU's roofline;
* CUDA-graph replay and per-kernel costs: the H200's ``overheads.json`` (measured here);
* prefill chunks after a cached prefix, skewed decode batches, fp8 KV: the fitted regressors
  extrapolate from the measured shapes (the roofline carries the context term);
* decode attention over spread contexts (``decode_spread.json``, :mod:`latsim.costmodel.spread`):
  the H200's table, copied when the source's decode call is the same FA3 kernel the H200's was
  probed with (:data:`SPREAD_KERNEL`: the H100 SXM, a Hopper part with the H200's 132 SMs and
  FA3's split scheduling; the excess is a ratio of spread to equal contexts on one GPU, not a
  time).  Other decode kernels (FA2, FlashInfer) get none: the model prices their batches at the
  mean context and says so (``not_measured``).

For a GPU of the H200's chip (the H100 SXM) the bf16 GEMM rows are corrected, before the fit, by the
source harness's bias measured on the H200, where latsim has both its own rows and the source's
(:mod:`latsim.calibration.aic_bias`).

The source's attention times include the KV-cache write, which latsim prices as its own op:
:func:`latsim.calibration.aic_adjust.less_kv_write` takes it out (``adjustments`` in
``profile.json``).  Deterministic: re-importing the same checkout gives identical files.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import IO, Any

import pandas as pd

from latsim.atomic import atomic_write, atomic_write_text
from latsim.calibration import aic_convert as conv
from latsim.calibration.aic_adjust import faster_than_roofline, less_kv_write
from latsim.calibration.aic_bias import SAME_CHIP, corrected_gemm, harness_record
from latsim.calibration.aic_source import SourceDB, load_source, provenance
from latsim.calibration.fit import fit_family, fit_frames, fit_profile, model_path
from latsim.catalog.devices import DeviceSpec
from latsim.costmodel.profile.floor import without_floor
from latsim.costmodel.profile.store import PROFILE, load_table, read_json, shipped_profile_dir
from latsim.costmodel.spread import SPREAD_FILE

FORMATS = ("aiconfigurator",)
CAPS = {"gemm": 6000, "prefill": 2500, "decode": 4000, "moe": 3000}
"""Rows kept per family (seeded sample): the size budget of a shipped profile."""
IMPORT_XGB: dict[str, Any] = {"n_estimators": 100, "max_depth": 5, "learning_rate": 0.1}
MEMORY_XGB: dict[str, Any] = {"n_estimators": 60, "max_depth": 4, "learning_rate": 0.15}
REFERENCE = "h200"
ADJUSTMENT = ("median_s = source time less latsim's own price of the KV-cache write the source's timed call "
              "includes (kv_write: memory-op copy curve + one graph kernel gap; latsim prices it as its own op), "
              "never below half; source_median_s keeps the source's time (latsim.calibration.aic_adjust)")
DROPPED = ("GEMM and attention rows timed below the datasheet roofline (bytes / HBM bandwidth or FLOPs / peak) "
           "are left out: their data came from a warm L2 cache in the source's loop, not HBM as in serving")
NOT_IN_SOURCE = {
    "memory": "memory-bound ops not in the source: efficiency curve fitted on latsim's own H200 measurements "
    "(latsim/data/calibration/h200/memory.parquet) applied to this GPU's roofline (transferred)",
    "overhead": "CUDA-graph replay and per-kernel costs not in the source: latsim's H200 overheads.json "
    "(measured here) used as is (transferred)",
    "prefill_with_prefix": "prefill after a cached prefix not in the source (context attention starts empty): "
    "the fitted regressor's ratio at ctx=0 applied to the roofline, which has the context term",
    "decode_skewed": "skewed decode contexts not in the source: uniform rows only (latsim prices decode from uniform)",
    "kv_fp8": "fp8 KV cache rows left out: bf16 KV curves priced on the fp8 roofline",
}
SPREAD_KERNEL = "vllm_flash_attn_fa3"
"""The decode kernel the reference profile's spread table was probed on (``scripts/device_skew_probe.py``)."""
SPREAD_TRANSFERRED = ("decode attention over spread contexts not in the source: latsim's H200 table "
                      "(latsim/data/calibration/h200/decode_spread.json, measured here) used as is (transferred: "
                      "the same FA3 decode call)")
SPREAD_NONE = ("decode attention over spread contexts not in the source and its decode kernel is not the one "
               "latsim probed (FA3): batches priced at their mean context")


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    """Write ``df`` as zstd parquet, atomically."""
    buf = io.BytesIO()
    df.to_parquet(buf, index=False, compression="zstd")

    def fill(f: IO[bytes]) -> None:
        f.write(buf.getvalue())

    atomic_write(path, fill)


def convert_all(db: SourceDB, seed: int = 0) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """latsim tables by family (``gemm``, ``attention``, ``moe``, ``comm``) and the kernels/selection used."""
    g, gk = conv.convert_gemm(db.frames["gemm"])
    p, pk = conv.convert_prefill(db.frames["context_attention"])
    d, dk = conv.convert_decode(db.frames["generation_attention"])
    att = pd.concat(
        [conv.subsample(p, CAPS["prefill"], seed), conv.subsample(d, CAPS["decode"], seed)], ignore_index=True
    )
    tables = {"gemm": conv.subsample(g, CAPS["gemm"], seed), "attention": att}
    chosen: dict[str, Any] = {"gemm": gk, "attention": {"prefill": pk, "decode": dk}}
    if "moe" in db.frames:
        m, mk = conv.convert_moe(db.frames["moe"])
        tables["moe"], chosen["moe"] = conv.subsample(m, CAPS["moe"], seed), mk
    if "allreduce" in db.frames:
        tables["comm"] = conv.convert_allreduce(db.frames["allreduce"])
    return tables, chosen


def _gpu_name(db: SourceDB) -> str:
    names = sorted({str(n) for df in db.frames.values() if "device" in df.columns for n in df["device"].unique()})
    if len(names) != 1:
        raise ValueError(f"{db.root / db.system}: tables name {len(names)} GPUs {names}; expected exactly one")
    return names[0]


def _profile(
    db: SourceDB, device: DeviceSpec, tables: dict[str, pd.DataFrame], chosen: dict[str, Any]
) -> dict[str, Any]:
    src = provenance(db)
    ident = hashlib.sha256(json.dumps([src["commit"], db.system, db.version, sorted(src["tables"].items())]).encode())
    impl = {"gemm": sorted(set(chosen["gemm"].values())), "attention": sorted(set(chosen["attention"].values()))}
    if "moe" in chosen:
        impl["moe"] = [chosen["moe"]["kernel"]]
    if "comm" in tables:
        impl["comm"] = sorted(set(tables["comm"]["impl"]))
    return {
        "format": 1,
        "device": device.name,
        "backend": "imported",
        "gpu_name": _gpu_name(db),
        "vllm": db.version,
        "date_utc": db.commit_date or "unknown",
        "grid": f"aiconfigurator-{db.version}",
        "grid_hash": ident.hexdigest()[:16],
        "complete": not db.missing,
        "counts": {f: {"ok": len(t)} for f, t in tables.items()},
        "impl": impl,
        "selection": chosen,
        "source": src,
        "not_measured": {**NOT_IN_SOURCE, **src["missing"]},
        "subsample": {"caps": CAPS, "seed": 0},
    }


def _reference_memory(seed: int) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(memory-op model, its report, overheads) from latsim's own reference (H200) profile."""
    from latsim.catalog import load_device

    ref = shipped_profile_dir(REFERENCE)
    over = read_json(ref / "overheads.json", "overheads")
    floor = float(over.get("graph_base_s", 0.0))
    table = without_floor(load_table(ref, "memory"), floor)
    model, rep = fit_family("memory", table, load_device(REFERENCE), seed, MEMORY_XGB)
    over["source"] = f"{REFERENCE} (measured here; transferred: the import source has no overhead data)"
    return model, {**rep, "transferred_from": f"latsim/data/calibration/{REFERENCE}/memory.parquet"}, over


def import_profile(
    fmt: str,
    path: Path,
    device: DeviceSpec,
    out: Path | None = None,
    version: str = "newest",
    allow_partial: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Import ``path`` (format ``fmt``) as ``device``'s profile in ``out`` (default: the device's
    shipped folder); returns the fit report.  ValueError when ``out`` holds a profile measured here
    (an import would overwrite some of its tables and leave the rest beside them)."""
    if fmt not in FORMATS:
        raise ValueError(f"--import {fmt!r} is not a known database format; accepted: {', '.join(FORMATS)}")
    out = Path(out) if out is not None else shipped_profile_dir(device.name)
    _refuse_measured(out)
    db = load_source(path, device.name, version, allow_partial)
    memory, memory_report, over = _reference_memory(seed)
    tables, chosen = convert_all(db, seed)
    dropped = {}
    for family in ("gemm", "attention"):
        fast = faster_than_roofline(family, tables[family], device)
        tables[family], dropped[family] = tables[family][~fast].reset_index(drop=True), int(fast.sum())
    per_kernel = float(over.get("graph_per_kernel_s", 0.0))
    tables["attention"] = less_kv_write(tables["attention"], memory, device, per_kernel)
    profile = _profile(db, device, tables, chosen)
    profile["adjustments"] = {"attention": ADJUSTMENT, "faster_than_roofline_dropped": dropped,
                              "faster_than_roofline": DROPPED}
    if device.name in SAME_CHIP:
        tables["gemm"] = corrected_gemm(tables["gemm"])
        profile["adjustments"]["gemm_harness"] = harness_record(tables["gemm"])
    out.mkdir(parents=True, exist_ok=True)
    profile["not_measured"]["decode_spread"] = transfer_spread(out, profile)
    for family, df in tables.items():
        write_parquet(out / f"{family}.parquet", df)
    atomic_write_text(out / PROFILE, json.dumps(profile, indent=1, default=str) + "\n")
    report = fit_profile(out, device, seed=seed, params=IMPORT_XGB)
    memory.get_booster().save_model(str(model_path(out, "memory")))
    atomic_write_text(out / "overheads.json", json.dumps(over, indent=1) + "\n")
    report["families"]["memory"] = memory_report
    report["imported"] = {
        "source": profile["source"],
        "not_measured": profile["not_measured"],
        "xgb_params": IMPORT_XGB,
        "memory_xgb_params": MEMORY_XGB,
    }
    atomic_write_text(out / "fit_report.json", json.dumps(report, indent=1) + "\n")
    return report


def _refuse_measured(out: Path) -> None:
    """ValueError when ``out`` holds a profile not imported (one ``latsim calibrate`` measured)."""
    if not (out / PROFILE).is_file():
        return
    backend = json.loads((out / PROFILE).read_text()).get("backend")
    if backend != "imported":
        raise ValueError(f"--out {out} holds a profile measured here (backend {backend!r}); an import would mix "
                         f"into it: give --out a new folder (e.g. {out.with_name(out.name + '-aic')})")


def transfer_spread(out: Path, profile: dict[str, Any]) -> str:
    """Write the reference profile's ``decode_spread.json`` into ``out`` (with where it came from)
    when ``profile``'s decode attention is :data:`SPREAD_KERNEL`, else remove any there; the
    ``not_measured`` line that says which."""
    target = out / SPREAD_FILE
    decode = ((profile.get("selection") or {}).get("attention") or {}).get("decode")
    if decode != SPREAD_KERNEL:
        target.unlink(missing_ok=True)
        return SPREAD_NONE
    source = shipped_profile_dir(REFERENCE) / SPREAD_FILE
    data = json.loads(source.read_text())
    data["transferred"] = {"from": f"latsim/data/calibration/{REFERENCE}/{SPREAD_FILE}",
                           "sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
                           "why": f"the source's decode attention is {SPREAD_KERNEL}, the call the table was probed on"}
    atomic_write_text(target, json.dumps(data, indent=1) + "\n")
    return SPREAD_TRANSFERRED


def refit_imported(folder: Path, device: DeviceSpec, families: tuple[str, ...], seed: int = 0) -> dict[str, Any]:
    """Re-fit ``families`` of an imported profile with the import's own parameters (:data:`IMPORT_XGB`).

    For a change of a family's features: the other families' models, the memory model fitted on
    latsim's own H200 rows and the report's ``imported`` record stay as the import wrote them
    (``latsim calibrate --fit-only`` would re-fit every family with the measured profiles'
    parameters).  Returns the updated fit report, which is also written.
    """
    report = json.loads((folder / "fit_report.json").read_text())
    floor = float(report.get("timer_floor_s", 0.0))
    frames = fit_frames(folder)
    for family in families:
        if family not in frames:
            raise ValueError(f"{folder}: no {family!r} table to re-fit; present: {', '.join(frames)}")
        model, rep = fit_family(family, without_floor(frames[family], floor), device, seed, IMPORT_XGB)
        model.get_booster().save_model(str(model_path(folder, family)))
        report["families"][family] = rep
    atomic_write_text(folder / "fit_report.json", json.dumps(report, indent=1) + "\n")
    return report
