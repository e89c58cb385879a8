#!/bin/bash
# runq5.sh "[--scored=...] variant tag [train-only ...]" ... : one after the other, nice 10; logs in build/exp5
cd "$(dirname "$0")"
R=$(cd ../../../.. && pwd)
for spec in "$@"; do
  set -- $spec
  tag=$2; [[ $1 == --scored=* ]] && tag=$3
  PYTHONPATH=${PKG:-$R}:. nice -n 10 /work/main/.venv-ci/bin/python harness5.py "$@" > $R/build/exp5/log_$tag.txt 2>&1
  tail -1 $R/build/exp5/log_$tag.txt >> $R/build/exp5/summary.txt
done
