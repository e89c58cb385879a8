#!/bin/bash
# runq.sh "variant tag [extra...]" ... : one after the other, nice 10
cd /work/wt/surr4/build/exp
for spec in "$@"; do
  set -- $spec
  PYTHONPATH=/work/wt/surr4/build/exp/pkg0:. nice -n 10 /work/main/.venv-ci/bin/python harness2.py "$@" > log_$2.txt 2>&1
  tail -1 log_$2.txt >> summary.txt
done
