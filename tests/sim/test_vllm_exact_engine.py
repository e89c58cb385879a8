"""``--engine vllm-exact``: vLLM's own scheduler on latsim's clock and cost model.

Where vLLM is importable the exact engine must reproduce latsim's scheduler request for request
(latsim's scheduler is itself checked step by step against vLLM in ``tests/differential``);
where it is not, asking for it is a one-line error (exit status 2 on the command line).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from latsim.cli import main
from latsim.sim.simulate import simulate
from latsim.workload.trace import RequestTrace
from tests.sim.conftest import LinearCost, small_deployment

COLUMNS = ["first_scheduled_s", "first_token_s", "finish_s", "preemptions", "cached_tokens", "status"]


def hide_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import vllm`` fail (and ``find_spec('vllm')`` answer None) for this test."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "vllm", None)


def sixty_requests() -> RequestTrace:
    """60 requests in 2 s; a third share a 128-token prefix (two groups) for prefix-cache hits."""
    rng = np.random.default_rng(1)
    n = 60
    group = np.where(np.arange(n) % 3 == 0, np.arange(n) % 2, -1)
    return RequestTrace.from_arrays(rng.uniform(0.0, 2.0, n), rng.integers(20, 400, n), rng.integers(5, 120, n),
                                    prefix_group=group, prefix_tokens=np.where(group >= 0, 128, 0))


def test_without_vllm_the_exact_engine_is_a_clear_value_error(monkeypatch):
    hide_vllm(monkeypatch)
    dep = small_deployment(engine="vllm-exact")
    with pytest.raises(ValueError, match=r"--engine vllm-exact needs vLLM importable \(pip install latsim\[vllm\]"):
        simulate(dep, sixty_requests(), cost_model=LinearCost())


def test_without_vllm_the_cli_says_so_in_one_line_and_exits_2(monkeypatch, capsys):
    hide_vllm(monkeypatch)
    monkeypatch.setattr(sys, "argv", ["latsim", "predict", "--num-requests", "5", "--engine", "vllm-exact"])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.count("\n") == 1 and "--engine vllm-exact needs vLLM importable" in err


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("num_gpu_blocks", [64, None], ids=["kv-pressure", "no-pressure"])
def test_vllms_own_scheduler_gives_latsims_records(num_gpu_blocks, asynchronous):
    pytest.importorskip("vllm")
    trace = sixty_requests()
    results = {
        engine: simulate(small_deployment(num_gpu_blocks, engine=engine, async_scheduling=asynchronous,
                                          max_num_seqs=16, max_num_batched_tokens=256),
                         trace, cost_model=LinearCost())
        for engine in ("vllm", "vllm-exact")
    }
    latsim, exact = (results[e].records[COLUMNS] for e in ("vllm", "vllm-exact"))
    assert (exact["status"] == "ok").all()
    assert exact.equals(latsim)  # bitwise: same steps, same prices, same token times
    for key in ("engine_steps", "kv_peak_utilization"):
        assert results["vllm-exact"].summary[key] == results["vllm"].summary[key]
    assert (exact["cached_tokens"] > 0).any()
    assert (exact["preemptions"].sum() > 0) == (num_gpu_blocks is not None)


@pytest.mark.parametrize("num_gpu_blocks", [150, None], ids=["kv-pressure", "no-pressure"])
def test_vllms_own_scheduler_over_sliding_window_groups(num_gpu_blocks):
    """26 of the 8B's 32 layers under a 64-token window: vLLM's scheduler over one full and five
    sliding groups, and latsim's, free the same blocks behind the windows (prefix caching off
    under pressure: there latsim's hits on the sliding groups are approximate, docs/vllm-v1-scheduling.md 4a)."""
    pytest.importorskip("vllm")
    from dataclasses import replace

    trace = sixty_requests()
    results = {}
    for engine in ("vllm", "vllm-exact"):
        dep = small_deployment(num_gpu_blocks, engine=engine, max_num_seqs=16, max_num_batched_tokens=256,
                               max_model_len=512, enable_prefix_caching=num_gpu_blocks is None)
        dep = replace(dep, model=replace(dep.model, sliding_window=64, num_sliding_window_layers=26))
        results[engine] = simulate(dep, trace, cost_model=LinearCost())
    latsim, exact = (results[e].records[COLUMNS] for e in ("vllm", "vllm-exact"))
    assert exact.equals(latsim)
    for key in ("engine_steps", "kv_peak_utilization"):
        assert results["vllm-exact"].summary[key] == results["vllm"].summary[key]
    assert (exact["preemptions"].sum() > 0) == (num_gpu_blocks is not None)
