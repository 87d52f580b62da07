#!/usr/bin/env bash
# How far two sweeps agree, measured on this machine: allreduce and bcast, 8 B - 16 MiB, two
# sweeps at least 10 minutes apart (A, then B), each at p = 2,4 and at p = 3, every
# registered algorithm, default --launches and --budget. Then:
#   - each sweep's wall time                                  -> RUN/wall_times.txt
#   - decision stability and regret of A's decisions on B     -> results/decision_stability_*.txt
#   - the model fitted on A, scored on B beside its ceiling   -> results/model_accuracy_trust_p*.txt
#   - the reference table re-shipped from A (p = 2, 3, 4, private and registered buffers:
#     a third sweep), and how far the old table's
#     speedups were inflated by gloo's threads                -> results/inflation.txt
# Run it on a quiet machine (nothing else running): it takes about 35 minutes.
#   scripts/trust_targets.sh [RUN_DIR]      (default runs/trust-DATE)
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/trust-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
gap="${GAP_SECONDS:-600}"  # between the starts of sweep A and sweep B
old_table="${OLD_TABLE:-a35345d:tuning_tables/reference-cpu-mpich-1node.json}"
mkdir -p "$run" "$out"
. scripts/results_lib.sh  # (the repository root is the working directory)

timed_sweep() {  # timed_sweep NAME NP: one sweep into $run/NAME, its wall time noted
    local name="$1" np="$2" start status=0
    start=$(date +%s)
    local before; before=$(load)
    osu-dl-bench sweep --np "$np" --collectives allreduce,bcast -m 8:16M -o "$run/$name" \
        || status=$?
    local seconds=$(( $(date +%s) - start ))
    printf '%s: --np %s: %d:%02d (%d s), exit %d, load before %s, after %s\n' "$name" "$np" \
        $((seconds / 60)) $((seconds % 60)) "$seconds" "$status" "$before" "$(load)" \
        | tee -a "$run/wall_times.txt"
    return "$status"
}


start_a=$(date +%s)
timed_sweep A24 2,4
timed_sweep A3 3
wait_s=$(( start_a + gap - $(date +%s) ))
if [ "$wait_s" -gt 0 ]; then
    echo "# waiting ${wait_s} s: sweep B starts ${gap} s after sweep A"
    sleep "$wait_s"
fi
timed_sweep B24 2,4
timed_sweep B3 3
cp "$run/wall_times.txt" "$out/trust_wall_times.txt"

# Decision stability and regret: A's decisions judged on B, per p.
with_command "$out/decision_stability_p2_p4.txt" osu-dl-bench compare "$run/A24" "$run/B24"
with_command "$out/decision_stability_p3.txt" osu-dl-bench compare "$run/A3" "$run/B3"

# The model: fitted on sweep A (its in-launch calibration and its points), scored on B
# beside B's ceiling (B's odd launches predicting its even ones).
for np in 24 3; do
    osu-dl-bench model fit "$run/A$np" --calibrate never > /dev/null
    with_command "$out/model_accuracy_trust_p$np.txt" osu-dl-bench model accuracy \
        "$run/B$np" --platform "$run/A$np"
done

# The reference table, re-measured (isolated, with intervals): sweep A at p = 2, 3, 4 and
# the same for registered buffers, merged into one run directory.
osu-dl-bench sweep --np 2,3,4 --collectives allreduce,bcast -m 8:16M -d cpu-registered \
    -o "$run/R" > /dev/null
osu-dl-bench merge "$run/A24" "$run/A3" "$run/R" -o "$run/reference" > /dev/null
table=tuning_tables/reference-cpu-mpich-1node
osu-dl-bench tune "$run/reference" -o "$table.json" --export openmpi,mpich > /dev/null
cp "$table.summary.txt" "$out/reference-summary.txt"
cp "$run/reference/results.csv" "$out/reference-sweep.csv"
cp "$run/reference/metadata.json" "$out/reference-sweep-metadata.json"
osu-dl-bench plot "$run/reference" --table "$table.json" -o "$out/plots" > /dev/null
with_command "$out/validation_p2_p4.txt" osu-dl-bench compare "$run/A24" "$run/B24" \
    --table "$table.json"
with_command "$out/validation_p3.txt" osu-dl-bench compare "$run/A3" "$run/B3" \
    --table "$table.json"

# Isolation: native's time with and without gloo in the sweep (its own launches), p = 2.
for algorithms in native native,gloo; do
    osu-dl-bench sweep --np 2 --collectives allreduce -a "$algorithms" -m 8:4M --budget 1 \
        -o "$run/isolation-${algorithms/,/-}" > /dev/null
done
with_command "$out/isolation_p2.txt" osu-dl-bench compare "$run/isolation-native" \
    "$run/isolation-native-gloo"

# How far the old table's speedups were inflated: its native ran beside gloo's threads.
git show "$old_table" > "$run/old-table.json"
with_command "$out/inflation.txt" python3 - "$run/old-table.json" "$table.json" <<'PY'
import json
import statistics
import sys

def points(path):
    table = json.load(open(path))
    return {  # private buffers: the kind both tables measured the same way
        (e["collective"], e["nprocs"], p["size_bytes"]): p
        for e in table["entries"] if e["device"] == "cpu" for p in e.get("points", [])
    }

old, new = points(sys.argv[1]), points(sys.argv[2])
print(f"# old table {sys.argv[1]} against the re-measured {sys.argv[2]}")
print(f"{'collective':<10}{'p':>3}{'sizes':>6}{'native old/new':>16}{'speedup old':>13}"
      f"{'speedup new':>13}{'replaced':>9}{'inflation':>11}")
for collective in ("allreduce", "bcast"):
    for nprocs in sorted({k[1] for k in old if k[0] == collective}):
        keys = [k for k in old if k[:2] == (collective, nprocs) and k in new]
        keys = [k for k in keys if old[k].get("native_median_us") and new[k].get("native_median_us")]
        if not keys:
            continue
        native = [old[k]["native_median_us"] / new[k]["native_median_us"] for k in keys]
        s_old = [old[k]["speedup"] for k in keys]
        s_new = [new[k]["speedup"] for k in keys]
        replaced = [k for k in keys if old[k]["chosen"] != "native"]
        inflated = [old[k]["speedup"] / new[k]["speedup"] for k in replaced] or [1.0]
        print(f"{collective:<10}{nprocs:>3}{len(keys):>6}{statistics.median(native):>15.2f}x"
              f"{statistics.fmean(s_old):>12.2f}x{statistics.fmean(s_new):>12.2f}x"
              f"{len(replaced):>9}{statistics.median(inflated):>10.2f}x"
              f"  (max {max(inflated):.2f}x)")
print("native old/new: median over sizes of the old table's native latency over the new "
      "one's; speedup: mean over sizes of native/chosen; replaced: sizes where the old table "
      "did not keep native; inflation: median there of the old speedup over the new one")
PY
echo "# done: $run"
