#!/usr/bin/env bash
# Which rank, which node: triage's verdicts over repeated runs on a cluster on this machine
# (scripts/cluster_local.sh up: 4 nodes; root), one rank per node:
#   results/cluster_triage.txt   per run, what `osu-dl-bench triage` named:
#     delay    rank 2 sleeps DELAY s before every call (OSU_DL_BENCH_DELAY_RANK, a test
#              hook), allreduce 8 B-4 KiB: named? its delay as measured
#     uniform  every link at RATE, bcast 8 B-4 MiB: anything named?
#     slow     node4's link at SLOW (a tenth of RATE), bcast 8 B-4 MiB: node4 named slow,
#              and no other node?
#
#   scripts/triage_targets.sh [RUN_DIR]
# RUNS (default 10) runs of each; RATE (1gbit), SLOW (100mbit), DELAY (0.005). The links
# are put back to RATE at the end, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/triage-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
runs="${RUNS:-10}"
rate="${RATE:-1gbit}"
slow="${SLOW:-100mbit}"
delay="${DELAY:-0.005}"
mkdir -p "$run" "$out"
[[ -x .venv/bin/osu-dl-bench ]] && export PATH="$PWD/.venv/bin:$PATH"
. scripts/results_lib.sh # (the repository root is the working directory)

need_cluster 4
shape() {
    # shape [--slow NODE=RATE]: every link at $rate (one at another rate where asked)
    cluster up --nodes "$nodes" --rate "$rate" "$@" >/dev/null
    eval "$(cluster env)"
}
trap 'shape' EXIT

bench() {
    # bench FILE ARGS...: one rank on each of 4 nodes, per-rank timing kept in FILE
    local file="$1"
    shift
    OSU_DL_BENCH_HOSTS=node1,node2,node3,node4 cluster mpiexec -n 4 -ppn 1 \
        osu-dl-bench bench "$@" --per-rank -o "$file" >"${file%.json}.txt" 2>&1 </dev/null
}

verdict() {
    # verdict FILE: the units triage named, one line: "late rank 2 (node3); slow node4"
    osu-dl-bench triage "$1" >"${1%.json}.triage"
    python3 - "${1%.json}.triage" <<'EOF'
import re, sys
kind, named = None, []
for line in open(sys.argv[1]):
    if line.rstrip(":\n") in ("late", "slow"):
        kind = line.strip().rstrip(":")
    elif kind and ": " in line and "nothing stands out" not in line:
        regime, rest = line.strip().split(": ", 1)
        unit = rest.split(" arrives")[0].split(" finishes")[0]
        by = re.search(r"; by ([^ ]+ [mu]s)", rest)
        named.append(f"{kind} {unit} ({regime}{', by ' + by.group(1) if by else ''})")
print("; ".join(named) or "nothing named")
EOF
}

within_a_fifth() {
    # within_a_fifth LINE: the delay measured for rank 2 is within 20% of DELAY
    local ms
    ms=$(sed -n 's/.*late rank 2 (node3) ([^,]*, by \([0-9.]*\) ms).*/\1/p' <<<"$1")
    [[ -n $ms ]] && awk -v m="$ms" -v d="$delay" 'BEGIN { e = m / (d * 1000) - 1; exit !(e < 0.2 && e > -0.2) }'
}

report() {
    # report CASE: one line per run, then the count the case is judged by
    local case="$1" hits=0 i line
    for ((i = 1; i <= runs; i++)); do
        line=$(cat "$run/$case-$i.verdict")
        echo "$case run $i: $line"
        case "$case" in
        delay) [[ $line == *"late rank 2 (node3)"* && $line != *"rank 0"* && $line != *"rank 1 "* && $line != *"rank 3"* ]] &&
            within_a_fifth "$line" && hits=$((hits + 1)) ;;
        uniform) [[ $line == "nothing named" ]] && hits=$((hits + 1)) ;;
        slow) [[ $line == *"slow node4"* && $line != *"slow node1"* && $line != *"slow node2"* &&
            $line != *"slow node3"* ]] && hits=$((hits + 1)) ;;
        esac
    done
    echo "# $case: $hits of $runs runs as expected${2:-}"
}

one_case() {
    # one_case CASE ARGS...: RUNS benches of the case, each triaged
    local case="$1" i
    shift
    for ((i = 1; i <= runs; i++)); do
        bench "$run/$case-$i.json" "$@"
        verdict "$run/$case-$i.json" >"$run/$case-$i.verdict"
    done
}

echo "# load before the runs: $(load) on $(nproc) cores" >"$run/load"
shape
OSU_DL_BENCH_DELAY_RANK="2:$delay" one_case delay allreduce -m 8:4K -i 50 -x 5
one_case uniform bcast -m 8:4M -i 20 -x 2
shape --slow "node4=$slow"
one_case slow bcast -m 8:4M -i 20 -x 2
shape
echo "# load after the runs: $(load)" >>"$run/load"

summary() {
    echo "# 4 nodes x 1 rank over scripts/cluster_local.sh, links at $rate; $runs runs each"
    echo "# delay: rank 2 (node3) sleeps $delay s before every allreduce (8 B-4 KiB, 50 iterations)"
    echo "# uniform: bcast 8 B-4 MiB, 20 iterations; slow: the same with node4's link at $slow"
    echo "# per run: osu-dl-bench triage RUN/CASE-I.json (the runs: $run)"
    cat "$run/load"
    report delay " (rank 2 named alone, its delay measured within 20% of $delay s)"
    report uniform " (nothing named)"
    report slow " (node4 named slow, no other node named slow)"
}
with_command "$out/cluster_triage.txt" summary
