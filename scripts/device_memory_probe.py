"""Start vLLM engines that differ in one memory knob and log what each leaves for the KV cache.

Each start is vLLM's offline ``LLM`` class on a copy of a catalog config with dummy weights; one
start per ``--start vocab=V,tokens=T,seqs=S`` (vocabulary size, ``max_num_batched_tokens``,
``max_num_seqs``). The engine's log goes to ``OUT/MODEL-vV-tT-sS.log.gz`` (MODEL: the config file's
stem) and one JSON line per start to ``OUT/memory.jsonl`` (weights, KV cache and captured-graph GiB
as the engine logged them, the GPU's name and total memory), so that ``data/memory/README.md``'s
table can be rebuilt from the logs alone. Runs on the device machine with vLLM importable
(``scripts/device_fidelity.sh memory``)::

    python3 scripts/device_memory_probe.py --config latsim/data/catalog/models/llama-3.2-1b.json \
        --out "$OUT" --start vocab=32768,tokens=4096,seqs=1024 --start vocab=262144,tokens=4096,seqs=1024

``--summarize LOG...`` (anywhere, no GPU) prints the table of ``data/memory/README.md`` from
engine logs: each start's weights, KV cache, CUDA-graph estimate and the rest of the budget
(``gpu_memory_utilization x --total-gib``, torch's view of the GPU's memory, less the three).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

from latsim.calibration.device_info import smi_rows

START_KEYS = ("vocab", "tokens", "seqs")
LOG_PATTERNS = {
    "weights_gib": re.compile(r"Model loading took ([\d.]+) GiB"),
    "kv_cache_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "graphs_gib": re.compile(r"Graph capturing finished in .*? took ([\d.]+) GiB"),
    "kv_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "tokens": re.compile(r"max_num_batched_tokens=(\d+)"),
    "seqs": re.compile(r"'max_num_seqs': (\d+)"),
    "vocab": re.compile(r"model='[^']*?(?:cfg|-v)(\d+)(?:-t\d+-s\d+)?'"),
    "util_without_graphs": re.compile(r"is equivalent to --gpu-memory-utilization=([\d.]+)"),
}
DEFAULT_SEQS = 1024
"""vLLM's offline ``max_num_seqs`` where a log's arguments do not name one."""
ENGINE = (
    "import sys; from vllm import LLM; "
    "LLM(model=sys.argv[1], load_format='dummy', skip_tokenizer_init=True, "
    "max_model_len=int(sys.argv[2]), gpu_memory_utilization=float(sys.argv[3]), "
    "max_num_batched_tokens=int(sys.argv[4]), max_num_seqs=int(sys.argv[5]))"
)


def parse_start(text: str) -> dict[str, int]:
    """``vocab=V,tokens=T,seqs=S`` -> {"vocab": V, "tokens": T, "seqs": S}; all three required."""
    fields = dict(part.split("=", 1) for part in text.split(","))
    if sorted(fields) != sorted(START_KEYS):
        raise SystemExit(f"--start {text!r}: give exactly {', '.join(k + '=N' for k in START_KEYS)}")
    return {key: int(fields[key]) for key in START_KEYS}


def read_log(text: str) -> dict[str, float]:
    """The memory figures an engine start logged (absent ones are left out)."""
    found: dict[str, float] = {}
    for key, pattern in LOG_PATTERNS.items():
        match = pattern.search(text)
        if match:
            found[key] = float(match.group(1).replace(",", ""))
    return found


def logged_graph_estimate(found: dict[str, float], util: float, total: float) -> float | None:
    """The CUDA-graph memory the engine set aside before its KV cache, in ``total``'s units (vLLM
    logs it as the utilisation ``util`` is "equivalent to" without it); None where it logged none."""
    if "util_without_graphs" not in found:
        return None
    return (util - found["util_without_graphs"]) * total


def summary_row(name: str, found: dict[str, float], total_gib: float, util: float) -> str:
    """One table row: the start's knobs, its logged GiB and the budget's remainder ("other")."""
    graphs = logged_graph_estimate(found, util, total_gib) or 0.0
    other = util * total_gib - found["weights_gib"] - found["kv_cache_gib"] - graphs
    return (f"| {name} | {int(found.get('vocab', 0)):,} | {int(found['tokens']):,} | "
            f"{int(found.get('seqs', DEFAULT_SEQS)):,} | {found['weights_gib']:.2f} | {found['kv_cache_gib']:.2f} | "
            f"{graphs:.2f} | {other:.2f} |")


def summarize(logs: list[Path], total_gib: float, util: float) -> None:
    """Print the README's table of the engine starts in ``logs`` (gzip)."""
    print("| start | vocabulary | batched tokens | sequences | weights | KV cache | graph estimate | other |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for log in logs:
        with gzip.open(log, "rt", errors="replace") as fh:
            found = read_log(fh.read())
        print(summary_row(log.name.removesuffix(".log.gz"), found, total_gib, util))


def _first_gpu(field: str) -> str:
    """nvidia-smi's ``field`` of the first GPU (exits when nvidia-smi gives none)."""
    rows = smi_rows(field)
    if not rows:
        raise SystemExit(f"nvidia-smi gave no {field} for a GPU: the probe needs one")
    return rows[0]


def gpu_total_gib() -> float:
    """The first GPU's total memory in GiB (nvidia-smi reports MiB)."""
    return float(_first_gpu("memory.total")) / 1024


def start_name(model: str, start: dict[str, int]) -> str:
    """A start's log name: the catalog model (the config file's stem), then its vocabulary, token
    budget and sequences (what ``scripts/fit_memory.py`` reads a probe's model and knobs from)."""
    return f"{model}-v{start['vocab']}-t{start['tokens']}-s{start['seqs']}"


def run_start(base: dict, start: dict[str, int], args: argparse.Namespace) -> dict:
    """Start one engine on ``base`` with the start's vocabulary; return its logged figures."""
    name = start_name(args.config.stem, start)
    model_dir = Path("/tmp/memcfg") / name
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps({**base, "vocab_size": start["vocab"]}))
    proc = subprocess.run(
        [sys.executable, "-c", ENGINE, str(model_dir), str(args.max_model_len),
         str(args.gpu_memory_utilization), str(start["tokens"]), str(start["seqs"])],
        capture_output=True, text=True,
    )
    log = proc.stdout + proc.stderr
    with gzip.open(args.out / f"{name}.log.gz", "wt") as fh:
        fh.write(log)
    return {"name": name, **start, "returncode": proc.returncode, **read_log(log)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--start", action="append")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    parser.add_argument("--summarize", type=Path, nargs="+", help="engine logs (gzip) to tabulate instead")
    parser.add_argument("--total-gib", type=float, default=79.19,
                        help="torch's total memory of the GPU (H100 SXM 79.19, H200 139.80)")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize, args.total_gib, args.gpu_memory_utilization)
        return
    if not (args.config and args.out and args.start):
        parser.error("--config, --out and --start are needed to start engines (or --summarize LOG...)")
    starts = [parse_start(text) for text in args.start]
    base = json.loads(args.config.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    total, gpu = gpu_total_gib(), _first_gpu("name")
    for start in starts:
        row = {**run_start(base, start, args), "gpu_name": gpu, "gpu_total_gib": round(total, 3),
               "gpu_memory_utilization": args.gpu_memory_utilization}
        print(json.dumps(row), flush=True)
        with open(args.out / "memory.jsonl", "a") as fh:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
