#!/usr/bin/env bash
# The trainer's collectives, measured on this machine (run it quiet: nothing else running):
#   tree     the tree allreduce against ring and native, 1-16 MiB, p = 2 and 4, over
#            launches                                   -> results/tree_allreduce_p2_p4.txt
#   replay   ResNet-50's gradient traffic replayed at p = 2, per algorithm and tuned
#                                                       -> results/bucket_replay_resnet50_p2.txt
#   train    tuned training against DDP-Gloo at p = 2, train-bench with the quick start's
#            table                                      -> results/train_p2.{txt,json}
#   cluster  training end to end on a network path, 2 nodes x 2 ranks of the cluster that
#            scripts/cluster_local.sh brought up (links at 1gbit; root): an allreduce sweep
#            there (and a native bcast sweep for the trainer's start-up bcast) -> tune ->
#            the table; train --adapt on it (the check's report, the choices kept in
#            training written as a table); train-bench with native, tuned, tuned/adapted,
#            fixed ring and hierarchical, DDP-Gloo, alternated over launches
#                                                       -> results/training_cluster_2x2.txt
#   cluster4x1  the same on 4 nodes x 1 rank (a cluster of at least 4 nodes)
#                                                       -> results/training_cluster_4x1.txt
#   scripts/training_targets.sh [RUN_DIR]   (default runs/training-DATE; TABLE=... names the
#   table, default runs/quickstart/table.json, which scripts/quickstart.sh writes; PARTS
#   picks parts, default "tree replay train"; LAUNCHES and ROUNDS size train-bench)
# OSU_DL_BENCH (default osu-dl-bench) is the command run, e.g. "python -m osu_dl_bench".
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/training-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
table="${TABLE:-runs/quickstart/table.json}"
mkdir -p "$run" "$out"
. scripts/results_lib.sh  # (the repository root is the working directory)
parts=" ${PARTS:-tree replay train} "
read -r -a odb <<< "${OSU_DL_BENCH:-osu-dl-bench}"

need_table() {
    [ -f "$table" ] || { echo "no table $table: run scripts/quickstart.sh first" >&2; exit 2; }
}

tree() {
    "${odb[@]}" sweep --np 2,4 --collectives allreduce -a native,ring,tree -m 1M:16M \
        -o "$run/tree"
    with_command "$out/tree_allreduce_p2_p4.txt" python scripts/family_ratios.py "$run/tree" tree ring
}

replay() {
    # replay ALGORITHMS SUFFIX: ResNet-50's buckets through bench at p = 2.
    mpiexec -n 2 "${odb[@]}" bench allreduce --buckets resnet50 -a "$1" --table "$table" -c \
        -i "${STEPS:-20}" -x 3 -o "$run/bucket_replay_resnet50_p2_$2.csv"
}

replays() {
    # Gloo's threads slow everything in its process: it gets a launch of its own (beside
    # native, the common reference), after the MPI library's candidates.
    local mpi_algorithms=native,ring,recursive_doubling,rabenseifner,reduce_bcast,allgather_reduce
    mpi_algorithms+=,tree,tree:trees=2,shm,cma,tuned
    with_command "$out/bucket_replay_resnet50_p2.txt" replay "$mpi_algorithms" mpi
    with_command "$run/bucket_replay_resnet50_p2_gloo.txt" replay native,gloo gloo
    tail -n +3 "$run/bucket_replay_resnet50_p2_gloo.txt" >> "$out/bucket_replay_resnet50_p2.txt"
}

train_p2() {
    # train-bench keeps its launches in the run directory OUT: a new measurement starts empty.
    rm -rf "$out/train_p2"
    "${odb[@]}" train-bench --np 2 --table "$table" --launches "${LAUNCHES:-3}" \
        --rounds "${ROUNDS:-3}" --out "$out/train_p2"
    echo "# load after: $(load)" >> "$out/train_p2.txt"
}

# The cluster's workload: ResNet-10 at width 32 on 16x16 images, global batch 32 (8 a rank):
# 1.2 M parameters, 4.9 MB of gradients in two buckets (1 MiB, then the rest) each step,
# which at 1 Gbit/s take tens of milliseconds to cross the nodes, against a few of compute
# per rank: a communication-bound step (the run measures its share).
workload=(--model resnet --depth 10 --width 32 --image-size 16 --num-classes 100 -b 32)
cluster_algorithms=native,ring,rabenseifner,recursive_doubling,tree,hierarchical
measured=native,native/no-overlap,tuned,tuned/adapted,ring:seg=256K,hierarchical:inner=native
measured+=,ddp-gloo

kept() { [ -f "$1/results.csv" ] && [ -f "$1/metadata.json" ] && grep -q '"complete": true' "$1/metadata.json"; }

cluster_layout() {
    # cluster_layout NODES PPN: 4 ranks as NODES nodes x PPN ranks (2 x 2, 4 x 1).
    local nodes_wanted=$1 ppn=$2
    use_cluster "$nodes_wanted"  # --np 4 over the first NODES nodes, in blocks of PPN
    local c="$run/cluster-${nodes_wanted}x$ppn"
    mkdir -p "$c"
    echo "# cluster $nodes_wanted x $ppn at $(cluster env | sed -n 's/^export OSU_DL_BENCH_CLUSTER_RATE=//p'), load $(load)" \
        | tee -a "$c/wall_times.txt"
    if ! kept "$c/allreduce"; then
        rm -rf "$c/allreduce"
        "${odb[@]}" sweep --np 4 --collectives allreduce -m 64K:8M -a "$cluster_algorithms" \
            -o "$c/allreduce"
    fi
    # The table's bcast entry (the trainer's start-up broadcast): native, measured alone.
    if ! kept "$c/bcast"; then
        rm -rf "$c/bcast"
        "${odb[@]}" sweep --np 4 --collectives bcast -m 64K:8M -a native --budget 0.5 \
            --launches 1 --no-null -o "$c/bcast"
    fi
    rm -rf "$c/merged"
    "${odb[@]}" merge -o "$c/merged" "$c/allreduce" "$c/bcast"
    "${odb[@]}" tune "$c/merged" -o "$c/table.json" > "$c/tune.txt"
    echo "# tuned $(date -u +%T), load $(load)" | tee -a "$c/wall_times.txt"
    # The check and --adapt in training: 2 warm-up steps, the check (about 50), 30 after.
    cluster mpiexec -n 4 -ppn "$ppn" "${odb[@]}" train --data synthetic "${workload[@]}" \
        --table "$c/table.json" --adapt --write-table "$c/adapted.json" --steps 90 \
        --progress off --json "$c/check.json" > "$c/check.txt"
    echo "# checked $(date -u +%T), load $(load)" | tee -a "$c/wall_times.txt"
    rm -rf "$c/bench"
    "${odb[@]}" train-bench --np 4 --table "$c/table.json" --adapted-table "$c/adapted.json" \
        --only "$measured" --launches "${LAUNCHES:-3}" --rounds "${ROUNDS:-3}" --steps 6 \
        --warmup 2 --stall-timeout 600 "${workload[@]}" --out "$c/bench"
    echo "# measured $(date -u +%T), load $(load)" | tee -a "$c/wall_times.txt"
    with_command "$out/training_cluster_${nodes_wanted}x$ppn.txt" python scripts/training_cluster_summary.py \
        "$c/bench.json" "$c/check.json" "$c/check.txt"
    {
        echo "# wall times and load:"
        cat "$c/wall_times.txt"
        echo "# train-bench's own table ($c/bench.txt):"
        cat "$c/bench.txt"
    } >> "$out/training_cluster_${nodes_wanted}x$ppn.txt"
}

case $parts in *" tree "*) tree ;; esac
case $parts in *" replay "*) need_table && replays ;; esac
case $parts in *" train "*) need_table && train_p2 ;; esac
case $parts in *" cluster "*) cluster_layout 2 2 ;; esac
case $parts in *" cluster4x1 "*) cluster_layout 4 1 ;; esac
