#!/usr/bin/env bash
# Time a full sweep: allreduce and bcast, every registered algorithm,
# 8 B - 16 MiB, p = 2 and 4, into a fresh run directory (default runs/full-sweep-DATE).
# Run it on a quiet machine: its wall time is the figure.
#   scripts/time_full_sweep.sh [RUN_DIR [extra sweep options, e.g. --budget 3]]
set -euo pipefail
cd "$(dirname "$0")/.."
run_dir="${1:-runs/full-sweep-$(date -u +%Y%m%dT%H%M%SZ)}"
[ $# -gt 0 ] && shift
if [ -e "$run_dir" ]; then
    echo "$run_dir exists: give a new run directory" >&2
    exit 2
fi
mkdir -p "$(dirname "$run_dir")"
# The load says whether the machine was quiet: other jobs would inflate the time.
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
start=$(date +%s)
status=0
osu-dl-bench sweep --np 2,4 --collectives allreduce,bcast -m 8:16M -o "$run_dir" "$@" || status=$?
seconds=$(( $(date +%s) - start ))
summary=$(printf 'full sweep: %d:%02d (%d s) on %s cores, exit %d, load before %s, after %s, in %s' \
    $((seconds / 60)) $((seconds % 60)) "$seconds" "$(nproc)" "$status" "$load_before" \
    "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")" "$run_dir")
echo "$summary"
if [ -d "$run_dir" ]; then
    echo "$summary" > "$run_dir/wall_time.txt"
fi
exit "$status"
