#!/usr/bin/env bash
# Keep a device `run` under its 64 MiB working-tree limit: the tracked data (about 180 MiB) is taken
# out of git's index and ignored for the call, then put back.  HEAD and the files are untouched;
# never commit between `on` and `off`.
#
#   bash scripts/device_slim_index.sh on    # before a `run` (refuses when the index has staged changes)
#   bash scripts/device_slim_index.sh off   # after it
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PATHS="data models latsim/data/surrogate latsim/data/calibration tests docs bench examples"
EXCLUDE=.git/info/exclude
MARK="# device_slim_index"
case "${1:-}" in
  on)
    git diff --cached --quiet || { echo "the index has staged changes: commit or unstage them first" >&2; exit 1; }
    grep -qx "$MARK" "$EXCLUDE" 2>/dev/null && { echo "already on" >&2; exit 1; }
    git rm -r -q --cached $PATHS
    { echo "$MARK"; for p in $PATHS; do echo "/$p/"; done; echo "$MARK end"; } >> "$EXCLUDE" ;;
  off)
    git reset -q
    sed -i "/^$MARK\$/,/^$MARK end\$/d" "$EXCLUDE" ;;
  *)
    echo "usage: $0 on|off" >&2; exit 2 ;;
esac
