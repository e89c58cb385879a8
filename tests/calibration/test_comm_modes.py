"""All-reduce modes (nccl, nccl_graph, vllm_custom): fitting, predictor choice, per-mode errors (CPU only)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from latsim.calibration import comm
from latsim.calibration.context import Skip
from latsim.calibration.fit_fixed import fit_allreduce, fit_fixed
from latsim.costmodel.profile import tables
from latsim.costmodel.profile.regressors import Predictors, load_predictors
from latsim.costmodel.profile.store import shipped_profile_dir

SIZES = [4096, 65536, 2**20, 2**24]
CURVES = {"nccl": 80e-6, "nccl_graph": 40e-6, "vllm_custom": 16e-6}


def _row(world: int, nbytes: int, mode: str | None, seconds: float, status: str = "ok") -> dict[str, Any]:
    row = {"point_id": f"comm:world={world},bytes={nbytes}", "family": "comm", "world": world, "bytes": nbytes,
           "status": status, "reason": None if status == "ok" else "x", "median_s": seconds}
    return row if mode is None else {**row, "mode": mode}


def _seconds(mode: str, nbytes: int) -> float:
    return CURVES[mode] * (1.0 + nbytes / 2**22)


def _three_modes(folder: Path) -> None:
    rows = [_row(2, n, m, _seconds(m, n)) for m in CURVES for n in reversed(SIZES)
            if not (m == "vllm_custom" and n > 2**22)]
    rows += [_row(2, 2**24, "vllm_custom", 1.0, "skipped"), _row(2, 2**28, "nccl_graph", 1.0, "error")]
    rows += [_row(4, n, "nccl", _seconds("nccl", n)) for n in SIZES]
    tables.write_shard(folder, "comm", rows)


def test_fit_writes_nccl_top_level_and_other_modes(tmp_path: Path) -> None:
    _three_modes(tmp_path)
    ar = fit_allreduce(tmp_path)
    assert ar is not None and set(ar) == {"worlds", "modes"}
    assert set(ar["worlds"]) == {"2", "4"} and ar["worlds"]["2"]["bytes"] == [float(n) for n in SIZES]
    assert ar["worlds"]["2"]["seconds"] == [_seconds("nccl", n) for n in SIZES]
    assert set(ar["modes"]) == {"nccl_graph", "vllm_custom"} and set(ar["modes"]["vllm_custom"]) == {"2"}
    assert ar["modes"]["vllm_custom"]["2"]["bytes"] == [float(n) for n in SIZES[:3]]  # skipped row left out
    assert ar["modes"]["nccl_graph"]["2"]["seconds"] == [_seconds("nccl_graph", n) for n in SIZES]  # no error row
    report = fit_fixed(tmp_path, tmp_path)["allreduce"]
    assert report["n_test"] == 2 + 2 and report["modes"]["vllm_custom"]["n_test"] == 1
    assert json.loads((tmp_path / "allreduce.json").read_text()) == ar


def test_rows_without_mode_are_nccl_in_the_old_layout(tmp_path: Path) -> None:
    tables.write_shard(tmp_path, "comm", [_row(2, n, None, _seconds("nccl", n)) for n in SIZES])
    ar = fit_allreduce(tmp_path)
    assert ar == {"worlds": {"2": _table("nccl", SIZES)}}
    report = fit_fixed(tmp_path, tmp_path)["allreduce"]
    assert "modes" not in report and report["n_test"] == 2


def _predictors(allreduce: dict[str, Any] | None) -> Predictors:
    return Predictors(Path("synthetic"), {}, {}, None, allreduce)


def _table(mode: str, sizes: list[int]) -> dict[str, list[float]]:
    return {"bytes": [float(n) for n in sizes], "seconds": [_seconds(mode, n) for n in sizes]}


def test_graph_prefers_vllm_custom_then_nccl_graph_then_nccl() -> None:
    ar = {"worlds": {"2": _table("nccl", [4096, 2**28])},
          "modes": {"vllm_custom": {"2": _table("vllm_custom", [4096, 2**22])},
                    "nccl_graph": {"2": _table("nccl_graph", [4096, 2**24])}}}
    p = _predictors(ar)
    sizes = np.array([1.0, 4096.0, 2.0**22, 2.0**23, 2.0**24, 2.0**26, 2.0**30])
    want = np.exp(np.interp(np.log(np.maximum(sizes, 1.0)), np.log([4096, 2**28]),
                            np.log([_seconds("nccl", 4096), _seconds("nccl", 2**28)])))
    np.testing.assert_allclose(p.allreduce_s(sizes, 2), want, rtol=1e-12)  # graph=False: eager nccl only
    got = p.allreduce_s(sizes, 2, graph=True)
    assert got is not None
    np.testing.assert_allclose(got[:3], [_seconds("vllm_custom", 4096)] * 2 + [_seconds("vllm_custom", 2**22)],
                               rtol=1e-12)
    assert _seconds("nccl_graph", 2**22) < got[3] < _seconds("nccl_graph", 2**24)
    np.testing.assert_allclose(got[4], _seconds("nccl_graph", 2**24), rtol=1e-12)
    np.testing.assert_allclose(got[5:], want[5:], rtol=1e-12)
    assert p.allreduce_s(sizes, 4) is None and p.allreduce_s(sizes, 4, graph=True) is None


def test_graph_falls_back_when_modes_are_missing() -> None:
    sizes = np.array([4096.0, 2.0**20, 2.0**30])
    only_nccl = _predictors({"worlds": {"2": _table("nccl", SIZES)}})
    np.testing.assert_array_equal(only_nccl.allreduce_s(sizes, 2, graph=True), only_nccl.allreduce_s(sizes, 2))
    no_nccl = _predictors({"worlds": {}, "modes": {"nccl_graph": {"2": _table("nccl_graph", SIZES)}}})
    assert no_nccl.allreduce_s(sizes, 2) is None
    got = no_nccl.allreduce_s(sizes, 2, graph=True)
    np.testing.assert_allclose(got, [_seconds("nccl_graph", 4096), _seconds("nccl_graph", 2**20),
                                     _seconds("nccl_graph", 2**24)], rtol=1e-12)
    assert _predictors(None).allreduce_s(sizes, 2, graph=True) is None


def test_shipped_h200_allreduce_is_unchanged() -> None:
    p = load_predictors(shipped_profile_dir("h200"))
    sizes = np.array([1.0, 4096.0, 65536.0, 3e5, 2.0**20, 2.0**23, 2.0**28, 2.0**30])
    want = [0.00010799999907612796, 0.00010799999907612796, 9.126400202512739e-05, 8.523797985092472e-05,
            8.617600053548818e-05, 9.254400059580806e-05, 0.0009622719883918763, 0.0009622719883918763]
    np.testing.assert_allclose(p.allreduce_s(sizes, 2), want, rtol=1e-12)
    if "modes" not in (p.allreduce or {}):
        np.testing.assert_allclose(p.allreduce_s(sizes, 2, graph=True), want, rtol=1e-12)


class _State:
    closed = 0

    def close(self) -> None:
        _State.closed += 1


def _fakes(monkeypatch: pytest.MonkeyPatch, setups: dict[str, Any], measures: dict[str, Any]) -> None:
    monkeypatch.setattr(comm, "SETUPS", {**comm.SETUPS, **setups})
    monkeypatch.setattr(comm, "MEASURES", {**comm.MEASURES, **measures})


def test_each_mode_fails_per_row_without_failing_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    def vllm_setup(g: Any) -> Any:
        raise Skip("vllm does not import: ModuleNotFoundError")

    def graph_measure(g: Any, state: Any, nbytes: int) -> dict[str, Any]:
        if nbytes == 65536:
            raise RuntimeError("capture failed")
        return {"median_s": 2e-5, "impl": "fake graph"}

    _fakes(monkeypatch, {"nccl": lambda g: _State(), "vllm_custom": vllm_setup},
           {"nccl": lambda g, s, n: {"median_s": n * 1e-9, "impl": "fake"}, "nccl_graph": graph_measure})
    seen: list[int] = []
    rows = comm.measure_modes(None, [4096, 65536], comm.MODES, lambda r: seen.append(len(r)))  # type: ignore[arg-type]
    assert seen == [2, 4, 6] and _State.closed >= 1
    assert [(r["mode"], r["bytes"], r["status"]) for r in rows] == [
        ("nccl", 4096.0, "ok"), ("nccl", 65536.0, "ok"), ("nccl_graph", 4096.0, "ok"),
        ("nccl_graph", 65536.0, "error"), ("vllm_custom", 4096.0, "skipped"), ("vllm_custom", 65536.0, "skipped")]
    assert rows[3]["reason"] == "RuntimeError: capture failed" and "vllm does not import" in rows[4]["reason"]
    assert rows[0]["median_s"] == 4096e-9 and rows[0]["reason"] is None


def test_failed_setup_and_size_skips_are_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(g: Any) -> Any:
        raise ValueError("no P2P")

    def too_big(g: Any, state: Any, nbytes: int) -> dict[str, Any]:
        raise Skip("above max_size")

    _fakes(monkeypatch, {"nccl_graph": broken}, {"vllm_custom": too_big})
    monkeypatch.setitem(comm.SETUPS, "vllm_custom", lambda g: None)
    rows = comm.measure_modes(None, [4096], ("nccl_graph", "vllm_custom"))  # type: ignore[arg-type]
    assert [(r["status"], r["reason"]) for r in rows] == [("error", "setup: ValueError: no P2P"),
                                                          ("skipped", "above max_size")]


def _ctx(spawn: Any, cuda: bool = True) -> Any:
    return SimpleNamespace(torch=SimpleNamespace(multiprocessing=SimpleNamespace(spawn=spawn)), is_cuda=cuda)


def test_run_group_keeps_rows_written_before_a_crash() -> None:
    def spawn(fn: Any, args: tuple[Any, ...], nprocs: int) -> None:
        world, sizes, out, _port, modes = args
        assert nprocs == world == 2 and modes == comm.MODES
        Path(out).write_text(json.dumps([{"bytes": float(n), "mode": "nccl", "status": "ok", "median_s": 1e-5}
                                         for n in sizes]))
        raise RuntimeError("process 1 terminated")

    rows = comm.run_group(_ctx(spawn), 2, [4096, 8192], comm.MODES)
    assert [(r["mode"], r["status"]) for r in rows] == [("nccl", "ok")] * 2 + [("nccl_graph", "error")] * 2 + [
        ("vllm_custom", "error")] * 2
    assert rows[-1]["reason"] == "RuntimeError: process 1 terminated"

    def dies(fn: Any, args: tuple[Any, ...], nprocs: int) -> None:
        raise RuntimeError("NCCL init failed")

    with pytest.raises(RuntimeError, match="NCCL init"):
        comm.run_group(_ctx(dies), 2, [4096])


def test_point_rows_attach_point_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    bases = [{"point_id": f"comm:world=2,bytes={n}", "family": "comm", "world": 2, "bytes": n} for n in (4096, 8192)]
    skipped = comm.point_rows(_ctx(None, cuda=False), 2, bases)
    assert [(r["point_id"], r["status"], r["mode"]) for r in skipped] == [(b["point_id"], "skipped", "nccl")
                                                                          for b in bases]

    def fake_group(ctx: Any, world: int, sizes: list[int], modes: tuple[str, ...]) -> list[dict[str, Any]]:
        return [{"bytes": float(n), "mode": m, "status": "ok", "reason": None} for m in modes for n in sizes]

    ctx = _ctx(None)
    ctx.torch.cuda = SimpleNamespace(device_count=lambda: 2)
    monkeypatch.setattr(comm, "run_group", fake_group)
    rows = comm.point_rows(ctx, 2, bases)
    assert len(rows) == 6 and {r["point_id"] for r in rows} == {b["point_id"] for b in bases}
    assert all(r["point_id"].endswith(f"bytes={int(r['bytes'])}") for r in rows)

    def broken(*a: Any) -> Any:
        raise OSError("spawn failed")

    monkeypatch.setattr(comm, "run_group", broken)
    assert {r["status"] for r in comm.point_rows(ctx, 2, bases)} == {"error"}


def test_vllm_setup_uses_the_installed_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without GPUs vLLM either does not import (Skip) or its custom all-reduce disables itself."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CPU-only check; on GPUs the constructor needs a gloo group")
    monkeypatch.setenv("VLLM_SKIP_P2P_CHECK", "1")
    g = comm.Group(torch, torch.distributed, 0, 2, None)
    with pytest.raises((Skip, RuntimeError), match=r"vllm does not import|disabled itself"):
        comm._setup_vllm(g)


def test_steps_within_the_graph_limit_use_the_graph_all_reduce() -> None:
    from latsim.catalog.lookup import load_device, load_model
    from latsim.costmodel.profile.tabulate import _allreduce
    from latsim.costmodel.shard import shard_model
    from latsim.engines.vllm.defaults import MAX_CUDAGRAPH_TOKENS as GRAPH_TOKENS

    shard = shard_model(load_model("llama-3.1-8b"), tp=2)
    ar = {"worlds": {"2": _table("nccl", [4096, 2**28])},
          "modes": {"vllm_custom": {"2": _table("vllm_custom", [4096, 2**23])}}}
    t = np.array([1.0, 64.0, float(GRAPH_TOKENS), GRAPH_TOKENS + 1.0, 4096.0])
    notes: list[str] = []
    got = _allreduce(_predictors(ar), shard, t, load_device("h200"), notes)
    nbytes = t * shard.hidden * shard.act_bytes
    count = 2.0 * shard.layers + 1.0
    custom = _predictors(ar).allreduce_s(nbytes, 2, graph=True)
    eager = _predictors(ar).allreduce_s(nbytes, 2)
    assert custom is not None and eager is not None
    np.testing.assert_allclose(got[:3], count * custom[:3], rtol=1e-12)  # graph replays: custom
    copy = 2.0 * nbytes[3] / load_device("h200").hbm_bandwidth  # an eager 4 MiB message: custom, copied in
    np.testing.assert_allclose(got[3], count * (custom[3] + copy), rtol=1e-12)
    np.testing.assert_allclose(got[4], count * eager[4], rtol=1e-12)  # 32 MiB: NCCL
    assert got[2] < got[3] < got[4] and not notes


def test_without_graph_timings_graph_steps_use_the_roofline_custom_all_reduce() -> None:
    from latsim.catalog.lookup import load_device, load_model
    from latsim.costmodel.profile.tabulate import _allreduce
    from latsim.costmodel.roofline_params import default_roofline_params
    from latsim.costmodel.shard import shard_model
    from latsim.engines.vllm.defaults import MAX_CUDAGRAPH_TOKENS as GRAPH_TOKENS

    shard, device = shard_model(load_model("llama-3.1-8b"), tp=2), load_device("h200")
    only_nccl = _predictors({"worlds": {"2": _table("nccl", [4096, 2**28])}})
    assert not only_nccl.has_graph_allreduce(2)
    t = np.array([8.0, float(GRAPH_TOKENS), 2048.0])
    notes: list[str] = []
    got = _allreduce(only_nccl, shard, t, device, notes)
    nbytes = t * shard.hidden * shard.act_bytes
    params = default_roofline_params()
    roofline = params.allreduce_latency_s + nbytes / (device.interconnect_bw * params.allreduce_efficiency)
    count = 2.0 * shard.layers + 1.0
    np.testing.assert_allclose(got[:2], count * roofline[:2], rtol=1e-12)
    np.testing.assert_allclose(got[2], count * only_nccl.allreduce_s(nbytes, 2)[2], rtol=1e-12)
    assert any("inside CUDA graphs not measured" in n for n in notes)


def _shard(tp: int, hidden: int = 4096) -> Any:
    return SimpleNamespace(tp=tp, layers=32, hidden=hidden, act_bytes=2.0)


def test_eager_steps_run_the_custom_all_reduce_below_its_largest_message() -> None:
    # vLLM 0.25.1 takes messages under 8 MiB to its custom all-reduce in eager steps too
    from latsim.catalog.lookup import load_device
    from latsim.costmodel.profile.tabulate import CUSTOM_AR_MAX_BYTES, _allreduce

    ar = {"worlds": {"2": _table("nccl", [4096, 2**28]), "4": _table("nccl", [4096, 2**28])},
          "modes": {"vllm_custom": {"2": _table("vllm_custom", [4096, 2**24]),
                                    "4": _table("vllm_custom", [4096, 2**24])}}}
    p, h200 = _predictors(ar), load_device("h200")
    t = np.array([256.0, 600.0, 1023.0, 1024.0, 4096.0])  # 8 KiB a token: 1,024 tokens is 8 MiB
    nbytes = t * 4096 * 2.0
    per_call = _allreduce(p, _shard(2), t, h200, []) / 65.0
    custom = p.allreduce_s(nbytes, 2, graph=True)
    nccl = p.allreduce_s(nbytes, 2)
    assert custom is not None and nccl is not None
    np.testing.assert_allclose(per_call[0], custom[0], rtol=1e-12)  # a graph step: no copy
    copy = 2.0 * nbytes / h200.hbm_bandwidth
    np.testing.assert_allclose(per_call[1:3], custom[1:3] + copy[1:3], rtol=1e-12)
    assert nbytes[3] == CUSTOM_AR_MAX_BYTES
    np.testing.assert_allclose(per_call[3:], nccl[3:], rtol=1e-12)
    # an imported profile's eager table timed the custom kernel eagerly: it prices those steps itself
    imported = Predictors(Path("synthetic"), {"impl": {"comm": ["vLLM custom all-reduce (eager)"]}}, {}, None, ar)
    np.testing.assert_allclose(_allreduce(imported, _shard(2), t, h200, [])[1:] / 65.0, nccl[1:], rtol=1e-12)
    # four GPUs over PCIe: vLLM turns the custom kernel off, the eager steps stay on NCCL
    l40s = load_device("l40s")
    pcie = _allreduce(p, _shard(4), t, l40s, []) / 65.0
    np.testing.assert_allclose(pcie[1:], p.allreduce_s(nbytes[1:], 4), rtol=1e-12)


def test_without_tables_the_all_reduce_does_not_drop_past_the_graph_size() -> None:
    # a step of 513 tokens runs eagerly; its custom all-reduce costs what the 512-token graph's does, plus the copy
    from latsim.catalog.lookup import load_device
    from latsim.costmodel.profile.tabulate import _allreduce

    t = np.array([512.0, 513.0, 900.0])
    for device in ("h200", "l40s"):
        got = _allreduce(_predictors(None), _shard(2), t, load_device(device), [])
        assert got[0] < got[1] < got[2]
