#!/usr/bin/env bash
# The fidelity session's device steps (issue: quantized weights, attention shapes, prefix hits,
# long prompts), one per device command, from the repository root on the H200 machine after the
# vLLM bundle's parts are in /tmp/b (../shared/DEVICE-VLLM.md):
#
#   bash scripts/device_fidelity.sh kernels      # unpack vLLM; attention-shape grid, fp8 GEMMs, quant kernels
#   bash scripts/device_fidelity.sh msteps       # GEMMs every few rows (96-1,024) and decode attention at live batches
#   bash scripts/device_fidelity.sh paged [paged-prefill]   # decode (prefill) attention over a paged KV cache
#   bash scripts/device_fidelity.sh wide         # attention of 48-96 query heads per GPU (grid "wide")
#   bash scripts/device_fidelity.sh grids G...   # the named grids one after another, gemm and attention
#                                                # (e.g. paged-prefill msteps-high marlin fp8-kv window narrow)
#   bash scripts/device_fidelity.sh graph G...   # the per-token operators of the named grids replayed in CUDA graphs
#                                                # (full: GEMMs, memory ops, MoE; other grids: GEMMs)
#   bash scripts/device_fidelity.sh probe        # a long prefill chunk: alone, beside decodes, sustained
#   bash scripts/device_fidelity.sh decode       # decode attention: the context staircase, spread and scattered blocks
#   bash scripts/device_fidelity.sh mixed        # decode rows inside a prompt's attention call against decode-only calls
#   bash scripts/device_fidelity.sh pbatch       # several prompts' chunks in one attention call against each alone
#   bash scripts/device_fidelity.sh softcap      # Gemma-2's attention call (soft-capped, scheduled in the call) against the grid's
#   bash scripts/device_fidelity.sh skew         # decode attention over spread contexts (long-prompt serving) and equal ones
#   bash scripts/device_fidelity.sh power        # kernels at the power cap: fresh against sustained, duty cycles
#   bash scripts/device_fidelity.sh int4         # 4-bit Machete with and without zero points, bursts and sustained
#   bash scripts/device_fidelity.sh live NAME ARGS...   # scripts/device_measure.py ARGS into $OUT/NAME.tar.gz
#   bash scripts/device_fidelity.sh trace NAME ARGS...  # scripts/device_trace.py ARGS into $OUT/NAME.tar.gz
#   bash scripts/device_fidelity.sh pair trace|live NAME ARGS...  # device_trace.py (trace) or device_measure.py
#                                                # (live) ARGS three times back to back: the model in the
#                                                # engine-core process, in a worker, in the engine core again
#                                                # (NAME-uni, NAME-mp, NAME-uni2), one $OUT/NAME.tar.gz
#   bash scripts/device_fidelity.sh serve NAME ARGS...  # scripts/device_serve_probe.py ARGS into $OUT/NAME.tar.gz
#   bash scripts/device_fidelity.sh memory ARGS...      # scripts/device_memory_probe.py ARGS: engine starts' memory
#
# The calibration steps record their rows for DEVICE (default h200): `DEVICE=h100 bash
# scripts/device_fidelity.sh grids msteps-high live-steps` times the 8B's and 70B's GEMMs just past 512 rows,
# then the 1B's, Phi-3-mini's and Qwen2.5-7B's, on an H100.  A grid run resumes from /tmp/latsim-calib: the
# same grid again on the same warm machine (e.g. `graph G` after `grids G`) finds it done unless that
# folder is removed first.  With scripts/device_slim_index.sh on, data/ does not travel: carry a config
# folder under data/ (e.g. data/validation/configs/gemma-3-27b-text) beside .vllm/vllm.sha256.
#
# Everything lands in $OUT (at most 8 files come back): calibration tarballs and summaries,
# quant_kernels.json, <NAME>.tar.gz of the measured run tree, and a log per step.
set -uo pipefail
: "${OUT:?OUT must name the output folder}"
DEVICE=${DEVICE:-h200}  # the catalog GPU the calibration grids are planned and recorded for (DEVICE=h100 on an H100)
export PYTHONPATH=/tmp/site:. VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1

unpack() {
  [ -d /tmp/site/vllm ] && return 0
  local want got
  want=$(cut -d' ' -f1 .vllm/vllm.sha256)
  got=$(cat /tmp/b/vllm.part* | sha256sum | cut -d' ' -f1)
  [ "$want" = "$got" ] || { echo "bundle checksum mismatch: $got != $want"; return 1; }
  mkdir -p /tmp/site && cat /tmp/b/vllm.part* | xz -d -T0 | tar -C /tmp/site -xf - || return 1
  python3 -c "import vllm; print('vllm', vllm.__version__)"
}

kernels() {
  unpack || return 1
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -m latsim.calibration.run_device --device "$DEVICE" --out "$OUT/shapes" --only shapes --families attention
  python3 -m latsim.calibration.run_device --device "$DEVICE" --out "$OUT/gemm" --only full --families gemm
  python3 scripts/device_quant_kernels.py
}

msteps() {
  unpack || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -m latsim.calibration.run_device --device "$DEVICE" --out "$OUT/msteps" --only msteps --families gemm,attention
}

paged() {
  unpack || return 1
  python3 -m latsim.calibration.run_device --device "$DEVICE" --out "$OUT/paged" --only "${1:-paged}" --families attention
}

wide() {
  unpack || return 1
  python3 -m latsim.calibration.run_device --device "$DEVICE" --out "$OUT/wide" --only wide --families attention
}

grids() {
  unpack || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  local g
  for g in "$@"; do
    python3 -m latsim.calibration.run_device --device "$DEVICE" --out "$OUT/$g" --only "$g" --families gemm,attention
  done
}

graph() {
  unpack || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  local g fams
  for g in "$@"; do
    fams=gemm
    [ "$g" = full ] && fams=gemm,memory,moe
    [ "$g" = moe-steps ] && fams=moe
    python3 -m latsim.calibration.run_device --device "$DEVICE" --out "$OUT/$g" --only "$g" --families "$fams" --op-timing graph
  done
}

probe() {
  unpack || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit --format=csv
  python3 scripts/device_prefill_probe.py --out "$OUT" "$@"
}

decode() {
  unpack || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 scripts/device_decode_probe.py --out "$OUT" "$@"
}

mixed() {
  unpack || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 scripts/device_mixed_probe.py --out "$OUT" "$@"
}

pbatch() {
  unpack || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 scripts/device_prefill_batch_probe.py --out "$OUT" "$@"
}

softcap() {
  unpack || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 scripts/device_softcap_probe.py --out "$OUT" "$@"
}

skew() {
  unpack || return 1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 scripts/device_skew_probe.py --out "$OUT" "$@"
}

power() {
  unpack || return 1
  python3 scripts/device_power_probe.py --out "$OUT" "$@"
}

int4() {
  unpack || return 1
  python3 scripts/device_int4_probe.py --out "$OUT" "$@"
}

live() {
  local name=$1; shift
  unpack || return 1
  rm -rf "/tmp/m/$name" && mkdir -p "/tmp/m/$name"
  python3 scripts/device_measure.py --out "/tmp/m/$name" "$@"
  tar -C /tmp/m -czf "$OUT/$name.tar.gz" "$name"
  ls -la "$OUT"
}

memory() {
  unpack || return 1
  nvidia-smi --query-gpu=name,memory.total --format=csv
  python3 scripts/device_memory_probe.py --out "$OUT/memory" "$@"
  ls -la "$OUT/memory"
}

serve() {
  local name=$1; shift
  unpack || return 1
  rm -rf "/tmp/m/$name" && mkdir -p "/tmp/m/$name"
  python3 scripts/device_serve_probe.py --out "/tmp/m/$name" "$@"
  gzip -f "/tmp/m/$name/server.log"
  tar -C /tmp/m -czf "$OUT/$name.tar.gz" "$name"
  ls -la "$OUT"
}

trace() {
  local name=$1; shift
  unpack || return 1
  rm -rf "/tmp/t/$name" && mkdir -p "/tmp/t/$name"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 scripts/device_trace.py --out "/tmp/t/$name" "$@"
  # the step tables and timings always; raw profiler traces only while the bundle stays small
  find "/tmp/t/$name/torch" -type f -size +3M -delete 2>/dev/null
  tar -C /tmp/t -czf "$OUT/$name.tar.gz" "$name"
  [ "$(stat -c %s "$OUT/$name.tar.gz")" -lt 15000000 ] || tar -C /tmp/t -czf "$OUT/$name.tar.gz" --exclude=torch "$name"
  ls -la "$OUT"
}

pair() {
  local kind=$1 name=$2; shift 2
  local tool
  case $kind in
    trace) tool=scripts/device_trace.py ;;
    live) tool=scripts/device_measure.py ;;
    *) echo "pair: trace or live, got '$kind'"; return 2 ;;
  esac
  unpack || return 1
  rm -rf "/tmp/t/$name" && mkdir -p "/tmp/t/$name"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  local run backend
  for run in uni mp uni2; do
    backend=${run%2}
    python3 "$tool" --out "/tmp/t/$name/$name-$run" --engine-arg "distributed_executor_backend=\"$backend\"" "$@"
  done
  find "/tmp/t/$name" -path '*/torch/*' -type f -delete 2>/dev/null
  tar -C /tmp/t -czf "$OUT/$name.tar.gz" "$name"
  ls -la "$OUT"
}

step=${1:?usage: device_fidelity.sh kernels | wide | live NAME ARGS... | trace NAME ARGS...}; shift
"$step" "$@" 2>&1 | tee -a "$OUT/$step-${1:-all}.log"
