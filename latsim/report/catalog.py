"""Tables of the model and GPU catalogs."""

from __future__ import annotations

from rich.table import Table

from latsim.catalog.lookup import list_devices, list_models, load_model
from latsim.catalog.models import ModelSpec
from latsim.catalog.sizing import kv_bytes_per_token, param_counts
from latsim.costmodel.factory import calibration_status


def models_table() -> Table:
    table = Table(title="Built-in models (or pass a path to any HF config.json); KV per token counts every layer, "
                        "a sliding layer holds at most its window", title_justify="left")
    for col in ("name", "family", "params (B)", "active (B)", "layers", "heads/kv", "KV KiB/token bf16",
                "sliding window", "context"):
        table.add_column(col, justify="left" if col in ("name", "family") else "right")
    for name in list_models():
        m = load_model(name)
        total, active = param_counts(m)
        table.add_row(name, m.family, f"{total / 1e9:.1f}", f"{active / 1e9:.1f}", str(m.num_layers),
                      f"{m.num_heads}/{m.num_kv_heads}", f"{kv_bytes_per_token(m, 'bf16') / 1024:.0f}",
                      window_text(m), f"{m.max_position_embeddings:,}")
    return table


def window_text(model: ModelSpec) -> str:
    """``"1,024 on 52"``: the sliding window and how many layers slide (they hold only the window's
    KV once a request outgrows it); ``-`` when none does."""
    if not model.num_sliding_window_layers:
        return "-"
    return f"{model.sliding_window:,} on {model.num_sliding_window_layers}"


def devices_table() -> Table:
    from latsim.plan.prices import price_of

    table = Table(title="GPUs (cost model: what predict uses: a profile measured here, one imported from "
                        "published kernel timings, or the roofline; $/GPU-h: what plan and compare use, from "
                        "latsim/data/prices.yaml, * where only the catalog's rough figure exists)",
                  title_justify="left")
    columns = ("name", "GPU", "memory GiB", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "link GB/s", "$/GPU-h",
               "cost model")
    for col in columns:
        table.add_column(col, justify="left" if col in ("name", "GPU", "cost model") else "right")
    for d in list_devices():
        fp8 = d.peak_flops.get("fp8")
        price = price_of(d.name)
        dollars = f"{price.usd_per_gpu_hour:.2f}" + ("*" if price.origin == "catalog" else "")
        table.add_row(d.name, d.display_name, f"{d.memory_gib:.1f}", f"{d.hbm_bandwidth / 1e12:.2f}",
                      f"{d.peak_flops['bf16'] / 1e12:.0f}", f"{fp8 / 1e12:.0f}" if fp8 else "-",
                      f"{d.interconnect_bw / 1e9:.0f}", dollars, calibration_status(d))
    return table
