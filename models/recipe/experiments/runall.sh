#!/bin/bash
# usage: runall.sh "variant tag [augment...]" ...
for spec in "$@"; do
  set -- $spec
  PYTHONPATH=/work/wt/surr3:. nice -n 10 /work/main/.venv-ci/bin/python harness.py "$@" > log_$2.txt 2>&1
  tail -1 log_$2.txt >> summary.txt
done
