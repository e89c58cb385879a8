"""A graph-sized prompt step's GEMMs at the full clock against the calibration's rows (issue 17).

Live traces of single 512-token prompts on an idle H200 (``data/traces/h200/s29/mx-llama-2-7b``,
``llama-3.1-8b-mixed``) ran their linear layers 8-12 % under the profile's rows for the same
shapes (rows of at most 512 tokens are timed by :class:`latsim.calibration.timing.GraphTimer`,
point after point with no pause).  Is that the clock (the rows timed in the power cap's state,
the live step at the full clock after an idle GPU), the dtype (Llama-2-7B runs fp16), or the
kernels?  Per model and row count this times the model's whole stack of linear layers (distinct
weights per layer, one CUDA graph, as vLLM replays a step):

1. ``cool``: one replay after ``PAUSE_S`` of idle GPU (median of ``COOL_REPEATS``);
2. ``hot``: one replay after ``HOT_S`` of back-to-back replays (median of the last ``HOT_TIMED``);
3. ``rows``: the calibration's own timer on each of the four shapes (one layer's weights
   rotated as the grid does), summed over the layers: what the profile's rows would say.

``--fills`` instead times the stacks of Llama-3.1-8B and Llama-2-7B at 256 and 512 rows with two
weight fills, ``randn x 0.02`` (a trained checkpoint's scale) and vLLM's dummy loader's uniform
values within +-1e-3 (what the validation's engines ran), cool and hot: whether the dummy fill
draws less power and so runs faster than real weights (``$OUT/step_clock_fills.json``).

Writes ``$OUT/step_clock_probe.json`` (seconds per step for each way; GPU, torch, CUDA
versions); prints a table.  Run ``nvidia-smi`` beside it for the clocks.  Plain torch, from the
repository root on the GPU machine: ``python3 scripts/device_step_clock_probe.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from device_int4_probe import CATALOG, catalog_shapes  # scripts/ is on the path when a script runs by path

from latsim.atomic import atomic_write_text
from latsim.calibration.timing import GraphTimer, capture_graph

MODELS = ("llama-3.1-8b", "llama-2-7b", "qwen2.5-32b")
"""Catalog models whose stacks are timed."""
ROWS = (128, 256, 384, 512)
PAUSE_S = 0.4
COOL_REPEATS = 5
HOT_S = 3.0
HOT_TIMED = 5
FILLS = ("randn", "dummy")
"""``randn``: normal x 0.02; ``dummy``: uniform within +-1e-3, as vLLM's ``load_format=dummy``."""
FILL_MODELS = ("llama-3.1-8b", "llama-2-7b")
FILL_ROWS = (256, 512)
ROTATE = 8
"""Weight sets the ``rows`` timer rotates among (as the grid keeps its inputs out of L2)."""


def _replay_s(torch: Any, graph: Any) -> float:
    """Seconds of one replay of ``graph``, between two events."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    graph.replay()
    b.record()
    torch.cuda.synchronize()
    return float(a.elapsed_time(b) * 1e-3)


def cool_and_hot(torch: Any, graph: Any) -> tuple[float, float]:
    """(median replay after an idle pause, median replay after ``HOT_S`` of replays)."""
    cool = []
    for _ in range(COOL_REPEATS):
        time.sleep(PAUSE_S)
        cool.append(_replay_s(torch, graph))
    end = time.perf_counter() + HOT_S
    while time.perf_counter() < end:
        for _ in range(10):
            graph.replay()
        torch.cuda.synchronize()
    hot = [_replay_s(torch, graph) for _ in range(HOT_TIMED)]
    return statistics.median(cool), statistics.median(hot)


def rows_s(torch: Any, dtype: Any, shapes: dict[str, tuple[int, int]], layers: int, m: int) -> float:
    """The calibration's GraphTimer on each shape, summed over ``layers``."""
    f, total = torch.nn.functional.linear, 0.0
    for k, n in shapes.values():
        ws = [weight(torch, n, k, dtype, "randn") for _ in range(ROTATE)]
        xs = [torch.randn(m, k, device="cuda", dtype=dtype) for _ in range(ROTATE)]
        total += GraphTimer(torch).time(lambda i, ws=ws, xs=xs: f(xs[i % ROTATE], ws[i % ROTATE])).median_s * layers
        del ws, xs
    return total


def model_stack(name: str) -> tuple[int, dict[str, tuple[int, int]]]:
    """A catalog model's layer count and the (K, N) of each linear layer at TP=1."""
    layers = int(json.loads((CATALOG / f"{name}.json").read_text())["num_hidden_layers"])
    return layers, catalog_shapes(name)


def weight(torch: Any, n: int, k: int, dtype: Any, fill: str) -> Any:
    """One ``n x k`` weight filled as ``fill`` (:data:`FILLS`)."""
    if fill == "dummy":
        return torch.empty(n, k, device="cuda", dtype=dtype).uniform_(-1e-3, 1e-3)
    return torch.randn(n, k, device="cuda", dtype=dtype) * 0.02


def stack_times(torch: Any, name: str, dtype: Any, m: int, fill: str = "randn") -> tuple[float, float]:
    """(cool, hot) seconds of the model's stack of linear layers at ``m`` rows."""
    layers, shapes = model_stack(name)
    f = torch.nn.functional.linear
    calls = []
    for _ in range(layers):
        for k, n in shapes.values():
            w = weight(torch, n, k, dtype, fill)
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            calls.append(lambda x=x, w=w: f(x, w))
    graph = capture_graph(torch, calls)
    torch.cuda.synchronize()
    times = cool_and_hot(torch, graph)
    del graph, calls
    torch.cuda.empty_cache()
    return times


def probe(torch: Any, name: str, dtype_name: str, m: int) -> dict[str, Any]:
    layers, shapes = model_stack(name)
    dtype = getattr(torch, dtype_name)
    cool, hot = stack_times(torch, name, dtype, m)
    row = {"model": name, "dtype": dtype_name, "M": m, "layers": layers, "cool_s": cool, "hot_s": hot,
           "rows_s": rows_s(torch, dtype, shapes, layers, m), "at": time.time()}
    torch.cuda.empty_cache()
    return row


def fills(torch: Any) -> list[dict[str, Any]]:
    """The stacks of :data:`FILL_MODELS` at :data:`FILL_ROWS` under each fill, cool and hot."""
    rows = []
    print(f"{'model':12s} {'fill':6s} {'M':>4s} {'cool ms':>8s} {'hot ms':>8s}")
    for name in FILL_MODELS:
        for m in FILL_ROWS:
            for fill in FILLS:
                cool, hot = stack_times(torch, name, torch.bfloat16, m, fill)
                rows.append({"model": name, "fill": fill, "M": m, "cool_s": cool, "hot_s": hot, "at": time.time()})
                print(f"{name:12s} {fill:6s} {m:4d} {cool * 1e3:8.2f} {hot * 1e3:8.2f}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--fills", action="store_true", help="compare weight fills instead (see the module note)")
    args = ap.parse_args()
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    versions = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
                "pause_s": PAUSE_S, "hot_s": HOT_S}
    if args.fills:
        result = {**versions, "rows": fills(torch)}
        atomic_write_text(out / "step_clock_fills.json", json.dumps(result, indent=1) + "\n")
        return
    cases = [(name, "bfloat16") for name in MODELS] + [("llama-2-7b", "float16")]
    rows = []
    print(f"{'model':12s} {'dtype':9s} {'M':>4s} {'cool ms':>8s} {'hot ms':>8s} {'rows ms':>8s}")
    for name, dtype_name in cases:
        for m in ROWS:
            row = probe(torch, name, dtype_name, m)
            rows.append(row)
            ms = [row[key] * 1e3 for key in ("cool_s", "hot_s", "rows_s")]
            print(f"{name:12s} {dtype_name:9s} {m:4d} {ms[0]:8.2f} {ms[1]:8.2f} {ms[2]:8.2f}", flush=True)
    result = {**versions, "rows": rows}
    atomic_write_text(out / "step_clock_probe.json", json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
