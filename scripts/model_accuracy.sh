#!/usr/bin/env bash
# The performance model's figures, measured on this machine:
#   1. accuracy at p = 2, 3, 4 on a sweep not used for the fit: two sweeps A and B of
#      allreduce + bcast (8 B - 16 MiB, every algorithm, --launches LAUNCHES), GAP seconds
#      apart; every launch of a sweep's "mpi" group also runs the calibration kernels
#      (calibration.csv in the sweep's directory: the machine in the sweep's own minutes and
#      states). `model fit A` fits the platform to A's calibration rows and the formulas'
#      corrections to A's sweep; `model accuracy B --platform A` scores it on B, each figure
#      beside B's ceiling (B's odd launches predicting its even ones)
#      -> results/model_accuracy_p2_p3_p4.txt, results/plots/model_accuracy.png,
#         results/model-platform-reference.json
#   2. the predicted tuning table for 1024 ranks, 8 per node, on the shipped (assumed)
#      InfiniBand HDR platform -> results/predicted-1024x8.{json,txt}
#   3. training: a fresh train-bench measurement at p = 2, then `model train` (compute
#      measured once, communication predicted per bucket) -> results/model_train_p2.txt
# Each result file starts with the command that produced it and the load around it.
#   scripts/model_accuracy.sh [RUN_DIR]   (default runs/model-DATE; BUDGET=s per point,
#                                          LAUNCHES=K, GAP=s between the sweeps, NP=2,3,4)
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/model-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
budget="${BUDGET:-1}"
launches="${LAUNCHES:-3}"
gap="${GAP:-600}"
np="${NP:-2,3,4}"
mkdir -p "$run" "$out/plots"
. scripts/results_lib.sh  # (the repository root is the working directory)


sweep() {  # sweep DIR: one sweep with its in-launch calibration, its wall time and load
    local started=$SECONDS
    echo "# sweep $1: load before $(load)"
    osu-dl-bench sweep --np "$np" --collectives allreduce,bcast -m 8:16M --budget "$budget" \
        --launches "$launches" -o "$1"
    echo "# sweep $1: $((SECONDS - started)) s wall, load after $(load)" | tee "$1/wall.txt"
}

sweep "$run/A"
sleep "$gap"
sweep "$run/B"
osu-dl-bench model fit "$run/A" --calibrate never
with_command "$out/model_accuracy_p2_p3_p4.txt" osu-dl-bench model accuracy "$run/B" \
    --platform "$run/A" --plot "$out/plots/model_accuracy.png" --csv "$run/accuracy.csv"
cp "$run/A/platform.json" "$out/model-platform-reference.json"

with_command "$out/predicted-1024x8.txt" osu-dl-bench model predict --np 1024 --ppn 8 \
    --platform ib-hdr200 -m 8:256M -o "$out/predicted-1024x8.json"

osu-dl-bench train-bench --np 2 --table tuning_tables/reference-cpu-mpich-1node.json \
    --out "$run/train_p2"
with_command "$out/model_train_p2.txt" osu-dl-bench model train --platform "$run/A" \
    --measured "$run/train_p2.json" --scale-platform ib-hdr200
grep "^average accuracy (messages" "$out/model_accuracy_p2_p3_p4.txt"
