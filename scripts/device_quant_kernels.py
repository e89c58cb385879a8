"""Time vLLM's dynamic per-token FP8 activation quantization (``scaled_fp8_quant``) on the GPU.

W8A8 linear layers quantize their bf16 input before the CUTLASS GEMM; the cost model prices
the one input no fused kernel produces as its ``act_quant`` op (:mod:`latsim.costmodel.ops`).
This prints, per (tokens, width), the kernel's median time and its achieved bandwidth, and
writes ``$OUT/quant_kernels.json`` for the comparison with that op's pricing.  Each call is an
eager Python call between two CUDA events, so below about 2,000 tokens the figure is the
launch (about 35 us on the lent H200), not the kernel; inside vLLM's CUDA graphs the launch is
not paid.

    PYTHONPATH=/tmp/site:. python3 scripts/device_quant_kernels.py
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

TOKENS = (1, 8, 32, 128, 512, 2048, 8192)
WIDTHS = (4096, 8192, 14336, 28672)
REPS = 50


def time_kernel(fn: object, torch: object) -> float:
    """Median seconds of ``fn()`` over :data:`REPS` CUDA-event-timed calls after a warm-up."""
    for _ in range(5):
        fn()  # type: ignore[operator]
    times = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[attr-defined]
        start.record()
        fn()  # type: ignore[operator]
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main() -> None:
    import torch
    from vllm import _custom_ops as ops

    rows = []
    for width in WIDTHS:
        for tokens in TOKENS:
            x = torch.randn(tokens, width, dtype=torch.bfloat16, device="cuda")
            t = time_kernel(lambda x=x: ops.scaled_fp8_quant(x, use_per_token_if_dynamic=True), torch)
            moved = tokens * width * 3 + tokens * 4  # bf16 in, fp8 out, one fp32 scale per row
            rows.append({"tokens": tokens, "width": width, "median_s": t, "bytes": moved})
            print(f"tokens {tokens:>6} width {width:>6}: {t * 1e6:8.2f} us  {moved / t / 1e9:8.1f} GB/s", flush=True)
    out = Path(os.environ.get("OUT", "."))
    (out / "quant_kernels.json").write_text(json.dumps({"kernel": "vllm._custom_ops.scaled_fp8_quant(per-token)",
                                                        "gpu": torch.cuda.get_device_name(0), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
