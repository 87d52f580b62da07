#!/usr/bin/env bash
# bench linkmap's target on a cluster on this machine (scripts/cluster_local.sh up; root):
# the last node's link shaped to 1/10 of the others, RUNS runs of linkmap with one rank
# per node, each counted when it names exactly that node's links (both ways) and the
# node; then the cluster uniform again, RUNS runs, each counted when it names anything.
#   results/cluster_linkmap.txt   the tallies, every run's findings and wall time, and the
#                                 first run of each as linkmap printed it
#
#   scripts/linkmap_check.sh [RUN_DIR]
# RUNS (10), RATE (1gbit) and SLOW_RATE (100mbit) set the runs and the shaping;
# LINKMAP_ARGS adds options to every run. The links are put back to RATE, none slow, at
# the end, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/linkmap-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
runs="${RUNS:-10}"
rate="${RATE:-1gbit}"
slow_rate="${SLOW_RATE:-100mbit}"
mkdir -p "$run" "$out"
[[ -x .venv/bin/osu-dl-bench ]] && export PATH="$PWD/.venv/bin:$PATH"
. scripts/results_lib.sh # (the repository root is the working directory)

need_cluster 3
slow="node$nodes"
# shape [--slow NODE=RATE]: every link at RATE (up again with the same nodes only reshapes).
shape() { cluster up --nodes "$nodes" --rate "$rate" "$@" >/dev/null 2>&1; }
trap shape EXIT
# shellcheck disable=SC2206 # LINKMAP_ARGS is split into words on purpose
extra=(${LINKMAP_ARGS:-})
linkmap=(osu-dl-bench bench linkmap "${extra[@]}")

linkmaps() {
    # linkmaps NAME: RUNS runs into RUN_DIR/NAME-I.json (the record), .txt (what linkmap
    # printed) and .wall (seconds, launch included), and the load around them.
    local i start
    echo "# load before the $1 runs: $(load) on $(nproc) cores" >"$run/$1.load"
    for ((i = 1; i <= runs; i++)); do
        start=$(date +%s.%N)
        cluster mpiexec -n "$nodes" -ppn 1 "${linkmap[@]}" -o "$run/$1-$i.json" \
            >"$run/$1-$i.txt" 2>&1 </dev/null || echo "# exit $?" >>"$run/$1-$i.txt"
        awk "BEGIN { print $(date +%s.%N) - $start }" >"$run/$1-$i.wall"
    done
    echo "# load after the $1 runs: $(load)" >>"$run/$1.load"
}

report() {
    echo "# cluster: $nodes nodes (scripts/cluster_local.sh), one rank each; every run:"
    echo "#   bash scripts/cluster_local.sh mpiexec -n $nodes -ppn 1 ${linkmap[*]} -o RUN.json"
    echo "# shaped: links at $rate, $slow's at $slow_rate. tbf shapes both directions of a"
    echo "#   node's link (its eth0 what it sends, the bridge's end of its veth what it receives),"
    echo "#   so A->$slow and $slow->A both cross $slow_rate"
    cat "$run/shaped.load"
    echo "# uniform: every link at $rate"
    cat "$run/uniform.load"
    echo "# python scripts/linkmap_runs.py --slow $slow --shaped $run/shaped-*.json --uniform $run/uniform-*.json"
    python scripts/linkmap_runs.py --slow "$slow" --shaped "$run"/shaped-*.json \
        --uniform "$run"/uniform-*.json
}

shape --slow "$slow=$slow_rate"
linkmaps shaped
shape
linkmaps uniform
with_command "$out/cluster_linkmap.txt" report
