#!/usr/bin/env bash
# The performance model's figures, measured on this machine:
#   1. accuracy at p = 2, 3, 4: a fresh allreduce + bcast sweep (8 B - 16 MiB, every
#      algorithm), each p's sweep between two calibration jobs of p ranks (the node's
#      contention state with p ranks active; appended: the fit keeps one state per p and
#      takes medians over its jobs, so parameters and measurements come from the same
#      minutes), then `model fit` and `model accuracy`
#      -> results/model_accuracy_p2_p3_p4.txt, results/plots/model_accuracy.png
#   2. the predicted tuning table for 1024 ranks, 8 per node, on the shipped (assumed)
#      InfiniBand HDR platform -> results/predicted-1024x8.{json,txt}
#   3. training: a fresh train-bench measurement at p = 2, then `model train` (compute
#      measured once, communication predicted per bucket) -> results/model_train_p2.txt
# Each result file starts with the command that produced it.
#   scripts/model_accuracy.sh [RUN_DIR]     (default runs/model-DATE; BUDGET=s per point)
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/model-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
budget="${BUDGET:-1}"
mkdir -p "$run" "$out/plots"
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?"; }

with_command() {  # with_command FILE CMD...: FILE gets '# command: CMD' and CMD's output
    local file="$1"
    shift
    { echo "# command: $*"; echo "# load before: $(load) on $(nproc) cores"; "$@"; } > "$file"
    echo "# wrote $file"
}

append=""
for p in 2 3 4; do
    osu-dl-bench model fit "$run" --calibrate always --np "$p" $append
    append="--append"
    osu-dl-bench sweep --np "$p" --collectives allreduce,bcast -m 8:16M --budget "$budget" \
        -o "$run/p$p"
    osu-dl-bench model fit "$run" --calibrate always --np "$p" --append
done
# One run directory for the three sweeps, beside the calibrations.
osu-dl-bench merge "$run"/p2 "$run"/p3 "$run"/p4 -o "$run"
with_command "$out/model_accuracy_p2_p3_p4.txt" osu-dl-bench model accuracy "$run" \
    --plot "$out/plots/model_accuracy.png" --csv "$run/accuracy.csv"
cp "$run/platform.json" "$out/model-platform-reference.json"

with_command "$out/predicted-1024x8.txt" osu-dl-bench model predict --np 1024 --ppn 8 \
    --platform ib-hdr200 -m 8:256M -o "$out/predicted-1024x8.json"

osu-dl-bench train-bench --np 2 --table tuning_tables/reference-cpu-mpich-1node.json \
    --out "$run/train_p2"
with_command "$out/model_train_p2.txt" osu-dl-bench model train --platform "$run" \
    --measured "$run/train_p2.json" --scale-platform ib-hdr200
tail -n 1 "$out/model_accuracy_p2_p3_p4.txt"
