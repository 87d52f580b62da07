#!/usr/bin/env bash
# How far the tables' decisions hold on this machine, and how often noise fools the rule:
# allreduce and bcast, 8 B - 16 MiB, every registered algorithm and the null control, at
# p = 2, 3 and 4 (3 and 4 oversubscribe a 2-core machine).
#   A, B, R  three exhaustive sweeps at the defaults, each starting at least GAP_SECONDS
#            after the previous one ended (Q1 and Q2 run in the gaps);
#            A's table judged on B with R as the referee (captured speedup scored on R)
#   D        an adaptive sweep (--adaptive 5), screened with the pool tune of A stored:
#            D's table judged on B, referee R
#   Q1, Q2   the quick start's sweep (p = 2, 4, --budget 0.5) twice; Q1's table on Q2
#   old      the previous release's rule (OLD_REV) on the same sweeps, side by side
#   df       A's table by the rule before honest degrees of freedom (DF_REV: df counted
#            per point), judged alike: what honest df costs in captured speedup
# Each compare reports stability (all-candidate tie sets), captured speedup, regret,
# agreement and coverage with its expectation under honesty, and the null control's
# false-win rate; wall times land in RUN/wall_times.txt. About an hour on a quiet 2-core
# machine.
#   scripts/decision_targets.sh [RUN_DIR [STEP...]]   (default runs/decisions-DATE, every
#   step: A Q1 B Q2 R D judge; a step whose run directory holds a finished sweep is kept)
# OSU_DL_BENCH (default osu-dl-bench) is the command run, e.g. "python -m osu_dl_bench".
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/decisions-$(date -u +%Y%m%dT%H%M%SZ)}"
shift || true
steps=("${@:-A Q1 B Q2 R D judge}")
read -r -a steps <<< "${steps[*]}"
out="${OUT:-results}"
gap="${GAP_SECONDS:-600}"
old_rev="${OLD_REV:-21a1d61}"
df_rev="${DF_REV:-dbf9127}"
read -r -a odb <<< "${OSU_DL_BENCH:-osu-dl-bench}"
mkdir -p "$run" "$out"
run=$(cd "$run" && pwd)  # absolute: the previous rule is tuned from another directory
. scripts/results_lib.sh

finished() { [ -f "$run/$1/results.csv" ] && grep -q "^$1: " "$run/wall_times.txt" 2>/dev/null; }

after_gap() {  # after_gap NAME: wait until GAP_SECONDS after NAME's sweep ended
    local ended
    ended=$(sed -n "s/^$1: .* ended \([0-9]*\)$/\1/p" "$run/wall_times.txt" | tail -1)
    local wait_s=$(( ${ended:-0} + gap - $(date +%s) ))
    if [ "$wait_s" -gt 0 ]; then
        echo "# waiting ${wait_s} s: ${gap} s after sweep $1 ended"
        sleep "$wait_s"
    fi
}

timed() {  # timed NAME ARGS...: one sweep into $run/NAME, its wall time noted
    local name="$1" start status=0 before
    shift
    if finished "$name"; then
        echo "# $name: kept ($run/$name)"
        return 0
    fi
    start=$(date +%s)
    before=$(load)
    "${odb[@]}" sweep "$@" -o "$run/$name" || status=$?  # 1: wrong results, kept and named
    local seconds=$(( $(date +%s) - start ))
    printf '%s: sweep %s: %d:%02d (%d s), %d rows, exit %d, load before %s, after %s, ended %d\n' \
        "$name" "$*" $((seconds / 60)) $((seconds % 60)) "$seconds" \
        "$(($(wc -l < "$run/$name/results.csv") - 1))" "$status" "$before" "$(load)" \
        "$(date +%s)" | tee -a "$run/wall_times.txt"
    [ "$status" -le 1 ]  # anything beyond wrong results (a failed launch) stops the script
}

every=(--np 2,3,4 --collectives allreduce,bcast -m 8:16M)
quick=(--np 2,4 --collectives allreduce,bcast -m 8:16M --budget 0.5)

tune_at() {  # tune_at REV SUFFIX NAME...: each run's table by the code at REV
    local rev="$1" suffix="$2" tree name
    shift 2
    tree=$(mktemp -d)
    git worktree add -q --detach "$tree/at" "$rev"
    for name in "$@"; do
        (cd "$tree/at" && PYTHONPATH="$tree/at" python -m osu_dl_bench tune "$run/$name" \
            -o "$run/$name-table-$suffix.json" > /dev/null)
    done
    git worktree remove --force "$tree/at"
}

judge() {
    local odb_text="${odb[*]}"
    with_command "$out/decisions_A_on_B.txt" "${odb[@]}" compare "$run/A" "$run/B" \
        --referee "$run/R"
    with_command "$out/decisions_adaptive_D_on_B.txt" "${odb[@]}" compare "$run/D" "$run/B" \
        --referee "$run/R"
    "${odb[@]}" tune "$run/Q1" -o "$run/Q1-table.json" > /dev/null
    with_command "$out/quickstart_table.txt" cat "$run/Q1-table.summary.txt"
    with_command "$out/quickstart_table_on_Q2.txt" "${odb[@]}" compare "$run/Q1" "$run/Q2" \
        --table "$run/Q1-table.json"
    # The quick start's sweeps have 3 launches (no held-out split): R, the exhaustive third
    # sweep of the same machine, referees its choices at p = 2 and 4.
    with_command "$out/quickstart_table_on_Q2_referee_R.txt" "${odb[@]}" compare "$run/Q1" \
        "$run/Q2" --table "$run/Q1-table.json" --referee "$run/R"
    # The previous rule on the same sweeps, for the tables beside today's; and today's
    # rule before honest degrees of freedom.
    tune_at "$old_rev" old Q1 A
    tune_at "$df_rev" df A
    with_command "$out/quickstart_table_previous_rule.txt" cat "$run/Q1-table-old.summary.txt"
    with_command "$out/quickstart_table_previous_rule_on_Q2.txt" "${odb[@]}" compare \
        "$run/Q1" "$run/Q2" --table "$run/Q1-table-old.json"
    with_command "$out/decisions_previous_rule_A_on_B.txt" "${odb[@]}" compare "$run/A" \
        "$run/B" --table "$run/A-table-old.json" --referee "$run/R"
    with_command "$out/decisions_df_per_point_A_on_B.txt" "${odb[@]}" compare "$run/A" \
        "$run/B" --table "$run/A-table-df.json" --referee "$run/R"
    cp "$run/wall_times.txt" "$out/decision_wall_times.txt"
    echo "# judged with: $odb_text"
}

for step in "${steps[@]}"; do
    case "$step" in
        A) timed A "${every[@]}" ;;
        Q1) timed Q1 "${quick[@]}" ;;
        B) after_gap A; timed B "${every[@]}" ;;
        Q2) timed Q2 "${quick[@]}" ;;
        R) after_gap B; timed R "${every[@]}" ;;
        # tune stores A's launch-variance pool: D screens with one launch, as a user's
        # adaptive sweep after an earlier sweep of this machine does (sweep --adaptive).
        D) "${odb[@]}" tune "$run/A" -o "$run/A-table.json" > /dev/null
           timed D "${every[@]}" --adaptive 5 ;;
        judge) judge ;;
        *) echo "unknown step $step: expected A Q1 B Q2 R D judge" >&2; exit 2 ;;
    esac
done
