#!/usr/bin/env bash
# Calibrate the GPU of the device machine: the quick grid, then the full grid, into $OUT.
#
#   bash scripts/device_calibrate.sh            # from the repository root, on the GPU machine
#   DEVICE=h200 bash scripts/device_calibrate.sh --only quick
#   bash scripts/device_calibrate.sh --only full --families comm,moe   # 2+ GPUs: all-reduce modes, vLLM MoE
#
# Results: $OUT/<device>-quick.tar.gz, $OUT/<device>-full.tar.gz, $OUT/summary.json and
# $OUT/calibrate.log.  Unpack a tarball into latsim/data/calibration/<device>/ and run
# `latsim calibrate --fit-only --profile DIR` on the development machine (xgboost lives there).
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${OUT:?OUT must name the output folder}"
mkdir -p "$OUT"
{
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0), "gpus", torch.cuda.device_count())'
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -m latsim.calibration.run_device --device "${DEVICE:-h200}" --out "$OUT" --quick-too "$@"
} 2>&1 | tee "$OUT/calibrate.log"
