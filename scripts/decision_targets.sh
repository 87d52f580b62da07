#!/usr/bin/env bash
# How far the tables' decisions hold on this machine: allreduce and bcast, 8 B - 16 MiB,
# every registered algorithm, at p = 2, 3 and 4.
#   A, B   two exhaustive sweeps at the defaults (--launches 3 --budget 1.5), B starting at
#          least GAP_SECONDS after A ended;                 A's decisions judged on B
#   C      an adaptive sweep (--adaptive 5, the defaults otherwise): one screening launch
#          (two where no launch-variance pool is stored for this host set and library), then
#          launches only where a choice is still open;      C's decisions judged on B
#   Q1, Q2 the quick start's sweep (p = 2, 4, --budget 0.5) twice; Q1's table judged on Q2,
#          and the tables of Q1 and A by the previous release's rule (OLD_REV) judged alike
# Each compare reports stability, regret, coverage, agreement and captured speedup per p;
# wall times land in RUN/wall_times.txt. About 45 minutes on a quiet 2-core machine.
#   scripts/decision_targets.sh [RUN_DIR]        (default runs/decisions-DATE)
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/decisions-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
gap="${GAP_SECONDS:-600}"
old_rev="${OLD_REV:-1220708}"
mkdir -p "$run" "$out"
run=$(cd "$run" && pwd)  # absolute: the previous rule is tuned from another directory
. scripts/results_lib.sh

timed() {  # timed NAME ARGS...: one sweep into $run/NAME, its wall time noted
    local name="$1" start status=0 before
    shift
    start=$(date +%s)
    before=$(load)
    osu-dl-bench sweep "$@" -o "$run/$name" || status=$?  # 1: wrong results, kept and named
    local seconds=$(( $(date +%s) - start ))
    printf '%s: sweep %s: %d:%02d (%d s), exit %d, load before %s, after %s\n' "$name" "$*" \
        $((seconds / 60)) $((seconds % 60)) "$seconds" "$status" "$before" "$(load)" \
        | tee -a "$run/wall_times.txt"
    [ "$status" -le 1 ]  # anything beyond wrong results (a failed launch) stops the script
}

every=(--np 2,3,4 --collectives allreduce,bcast -m 8:16M)
quick=(--np 2,4 --collectives allreduce,bcast -m 8:16M --budget 0.5)
timed A "${every[@]}"
a_end=$(date +%s)
timed Q1 "${quick[@]}"
wait_s=$(( a_end + gap - $(date +%s) ))
if [ "$wait_s" -gt 0 ]; then
    echo "# waiting ${wait_s} s: sweep B starts ${gap} s after sweep A ended"
    sleep "$wait_s"
fi
timed B "${every[@]}"
timed C "${every[@]}" --adaptive 5
timed Q2 "${quick[@]}"
cp "$run/wall_times.txt" "$out/decision_wall_times.txt"

with_command "$out/decisions_A_on_B.txt" osu-dl-bench compare "$run/A" "$run/B"
with_command "$out/decisions_adaptive_C_on_B.txt" osu-dl-bench compare "$run/C" "$run/B"
osu-dl-bench tune "$run/Q1" -o "$run/Q1-table.json" > /dev/null
with_command "$out/quickstart_table.txt" cat "$run/Q1-table.summary.txt"
with_command "$out/quickstart_table_on_Q2.txt" osu-dl-bench compare "$run/Q1" "$run/Q2" \
    --table "$run/Q1-table.json"
# The previous rule on the same sweep, for the table beside today's.
tree=$(mktemp -d)
git worktree add -q "$tree/old" "$old_rev"
for name in Q1 A; do
    (cd "$tree/old" && PYTHONPATH="$tree/old" python -m osu_dl_bench tune "$run/$name" \
        -o "$run/$name-table-old.json" > /dev/null)
done
git worktree remove --force "$tree/old"
with_command "$out/quickstart_table_previous_rule.txt" cat "$run/Q1-table-old.summary.txt"
with_command "$out/quickstart_table_previous_rule_on_Q2.txt" osu-dl-bench compare "$run/Q1" \
    "$run/Q2" --table "$run/Q1-table-old.json"
with_command "$out/decisions_previous_rule_A_on_B.txt" osu-dl-bench compare "$run/A" "$run/B" \
    --table "$run/A-table-old.json"
