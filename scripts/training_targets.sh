#!/usr/bin/env bash
# The trainer's collectives, measured on this machine (run it quiet: nothing else running):
#   - the tree allreduce against ring and native, 1-16 MiB, p = 2 and 4, over launches
#                                                        -> results/tree_allreduce_p2_p4.txt
#   - ResNet-50's gradient traffic replayed at p = 2, per algorithm and tuned
#                                                        -> results/bucket_replay_resnet50_p2.txt
#   - tuned training against DDP-Gloo at p = 2, train-bench with the quick start's table
#                                                        -> results/train_p2.{txt,json}
#   scripts/training_targets.sh [RUN_DIR]   (default runs/training-DATE; TABLE=... names the
#   table, default runs/quickstart/table.json, which scripts/quickstart.sh writes)
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/training-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
table="${TABLE:-runs/quickstart/table.json}"
mkdir -p "$run" "$out"
. scripts/results_lib.sh  # (the repository root is the working directory)
[ -f "$table" ] || { echo "no table $table: run scripts/quickstart.sh first" >&2; exit 2; }

osu-dl-bench sweep --np 2,4 --collectives allreduce -a native,ring,tree -m 1M:16M \
    -o "$run/tree"
with_command "$out/tree_allreduce_p2_p4.txt" python scripts/family_ratios.py "$run/tree" tree ring

# Gloo's threads slow everything in its process: it gets a launch of its own (beside
# native, the common reference), after the MPI library's candidates.
mpi_algorithms=native,ring,recursive_doubling,rabenseifner,reduce_bcast,allgather_reduce
mpi_algorithms+=,tree,tree:trees=2,shm,cma,tuned
replay() {
    mpiexec -n 2 osu-dl-bench bench allreduce --buckets resnet50 -a "$1" --table "$table" -c \
        -i "${STEPS:-20}" -x 3 -o "$run/bucket_replay_resnet50_p2_$2.csv"
}
with_command "$out/bucket_replay_resnet50_p2.txt" replay "$mpi_algorithms" mpi
with_command "$run/bucket_replay_resnet50_p2_gloo.txt" replay native,gloo gloo
tail -n +3 "$run/bucket_replay_resnet50_p2_gloo.txt" >> "$out/bucket_replay_resnet50_p2.txt"

# train-bench keeps its launches in the run directory OUT: a new measurement starts empty.
rm -rf "$out/train_p2"
osu-dl-bench train-bench --np 2 --table "$table" --launches "${LAUNCHES:-3}" --rounds "${ROUNDS:-3}" \
    --out "$out/train_p2"
echo "# load after: $(load)" >> "$out/train_p2.txt"
