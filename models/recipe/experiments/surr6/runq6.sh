#!/bin/bash
# runq6.sh "TAG PARAMS_JSON [TARGET ...]" ... : one after the other, nice 10; logs in build/exp6
cd "$(dirname "$0")"
R=$(cd ../../../.. && pwd)
for spec in "$@"; do
  eval "set -- $spec"
  PYTHONPATH=$R:. nice -n 10 $R/.venv-ci/bin/python harness6.py "$@" > $R/build/exp6/log_$1.txt 2>&1
  tail -1 $R/build/exp6/log_$1.txt >> $R/build/exp6/summary.txt
done
