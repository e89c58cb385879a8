#!/usr/bin/env bash
# Build the H100's own profile from its calibration runs kept in data/kernels/h100-*, the order
# the H200's profile was merged in (data/kernels/README.md), then fit it:
#
#   bash scripts/native_h100_profile.sh OUT_DIR
#
# The base is the `full` grid (every family but all-reduce; GEMMs, memory ops and MoE layers up to
# 512 tokens replayed in CUDA graphs, above it each at the full clock); decode and prefill
# attention are replaced by the paged grids' rows (vLLM's own call over a paged cache); the
# fp8-KV, wide-head, M-step, 4-bit and MoE-step grids add their points; the per-call rows past 512
# (msteps-high) are re-timed at the full clock where the cool grid measured them.  All-reduce is
# not measured on one GPU: comm.parquet/allreduce.json come from the imported H100 profile, as
# does the decode-spread table (transferred from the H200 there).  Runs `latsim calibrate
# --fit-only` at the end.  The profile's power.json is not built here: it is fitted over the
# shipped folder by scripts/fit_power.py (the command it records; data/power/README.md, "The
# H100's own power fit"), and records that folder's paths.
set -euo pipefail
out=${1:?usage: native_h100_profile.sh OUT_DIR}
k=data/kernels
[ -e "$out" ] && { echo "$out exists: give a new folder" >&2; exit 2; }
mkdir -p "$out"
cp "$k/h100-full/"*.parquet "$k/h100-full/profile.json" "$out/"
imported=latsim/data/calibration/h100-aic
cp "$imported/comm.parquet" "$imported/allreduce.json" "$imported/decode_spread.json" "$out/"
merge() { python scripts/merge_calibration.py --profile "$out" "$@" >/dev/null; }
merge --run "$k/h100-paged" --family attention --mode update
merge --run "$k/h100-paged-prefill" --family attention --mode update
merge --run "$k/h100-fp8-kv" --family attention --mode append
merge --run "$k/h100-wide" --family attention --mode append
merge --run "$k/h100-decode-tiles" --family attention --mode append --into decode_tiles
merge --run "$k/h100-msteps" --family gemm --mode append
merge --run "$k/h100-msteps-high" --family gemm --mode append
merge --run "$k/h100-heavy-gemm-steps" --family gemm --mode update --known-points
merge --run "$k/h100-w4a16" --family gemm --mode update
merge --run "$k/h100-w4-steps" --family gemm --mode update
merge --run "$k/h100-moe-steps" --family moe --mode append
latsim calibrate --fit-only --profile "$out"
