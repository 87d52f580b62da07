#!/usr/bin/env bash
# The figures only a network shows, measured on a cluster on this machine
# (scripts/cluster_local.sh up: 4 nodes, links at 1gbit; root):
#   results/cluster_model_fit_1gbit.txt    model fit at 2 nodes, one rank each: the fitted
#                                          inter-node bandwidth beside the shaped rate
#   results/cluster_model_fit_250mbit.txt  the same with every link at 250mbit
#   results/cluster_hierarchical_2x2.txt   allreduce and bcast swept at 2 nodes x 2 ranks,
#                                          64 KiB-16 MiB: hierarchical against the best flat
#                                          algorithm and native (paired, 95% intervals), and
#                                          the tuned table's summary
#   results/cluster_accuracy_4x1.txt       the 2-node fit predicting a 4-node sweep (4 x 1)
#   results/cluster_train_2x2.txt          train --validate at 2 x 2 with the 2 x 2 table
#   results/cluster_decisions_2x2.txt      the 2 x 2 sweeps again, at least 10 minutes after
#                                          the first: the first's decisions judged on them
#   results/cluster_hierarchical_2x2_small.txt  the same sweeps at 8 B-32 KiB
#   results/cluster_layouts.txt            hierarchical against flat and native at 4 x 1 and
#                                          2 x 1, 8 B-16 MiB
#   results/cluster_library_2x2.txt        MPICH's own allreduce and bcast algorithms forced
#                                          one by one at 2 x 2 (native:alg=all), tuned, and
#                                          the exported selection file's notes
#
#   scripts/cluster_targets.sh [RUN_DIR]
# PARTS (default "fit hierarchical accuracy train stability"; also "small layouts library") picks parts; stability and
# train need hierarchical's sweeps in RUN_DIR, accuracy needs fit's. BUDGET (timed seconds
# per point, all launches; default 4) and LAUNCHES (3) trade time for width. The links are
# put back to 1gbit at the end, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/cluster-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
budget="${BUDGET:-4}"
parts=" ${PARTS:-fit hierarchical accuracy train stability} "
launches="${LAUNCHES:-3}"
mkdir -p "$run" "$out"
[[ -x .venv/bin/osu-dl-bench ]] && export PATH="$PWD/.venv/bin:$PATH"
. scripts/results_lib.sh # (the repository root is the working directory)

need_cluster 4
rate() {
    # rate RATE: every link shaped to RATE (up again with the same nodes only reshapes).
    cluster up --nodes "$nodes" --rate "$1" >/dev/null
    eval "$(cluster env)"
}
trap 'rate 1gbit' EXIT
rate 1gbit
hosts2=node1,node2
hosts4=node1,node2,node3,node4

fit() {
    # fit RATE SIZES: calibrate at 2 nodes, one rank each, and fit.
    rate "$1"
    rm -rf "$run/fit-$1"
    with_command "$out/cluster_model_fit_$1.txt" env OSU_DL_BENCH_HOSTS=$hosts2 \
        osu-dl-bench model fit --np 2 -m "$2" "$run/fit-$1"
    rate 1gbit
}

sweep() {
    # sweep HOSTS NP COLLECTIVES ALGORITHMS DIR [SIZES]: ranks in blocks over HOSTS
    rm -rf "$5"
    OSU_DL_BENCH_HOSTS=$1 osu-dl-bench sweep --np "$2" --collectives "$3" -m "${6:-64K:16M}" \
        -a "$4" --budget "$budget" --launches "$launches" --no-calibration -o "$5" \
        >"$5.log" 2>&1 </dev/null
}
flat_allreduce=ring,recursive_doubling,rabenseifner,reduce_bcast,tree
flat_bcast=binomial,chain,scatter_ring_allgather,scatter_rd_allgather
hier_allreduce=hierarchical:inner=native,hierarchical:inner=ring,hierarchical:inner=rabenseifner
hier_bcast=hierarchical:inner=native,hierarchical:inner=binomial,hierarchical:inner=chain
sweeps_2x2() {
    # sweeps_2x2 SUFFIX [SIZES]: allreduce and bcast at 2 nodes x 2 ranks, flat and
    # hierarchical. The reports run after the sweeps: what the machine was doing during
    # them is kept.
    echo "# load before the sweeps$1: $(load) on $(nproc) cores" >"$run/h2x2$1.load"
    sweep "$hosts2" 4 allreduce \
        "native,ring:seg=0,recursive_doubling,rabenseifner,reduce_bcast,tree,$hier_allreduce" \
        "$run/h2x2-allreduce$1" "${2:-64K:16M}"
    sweep "$hosts2" 4 bcast \
        "native,binomial,chain,scatter_ring_allgather,scatter_rd_allgather,$hier_bcast" \
        "$run/h2x2-bcast$1" "${2:-64K:16M}"
    echo "# load after the sweeps$1: $(load)" >>"$run/h2x2$1.load"
}
hierarchical_ratios() {
    # hierarchical_ratios PREFIX [SUFFIX]: hierarchical against the best flat algorithm and
    # native, in PREFIX-allreduceSUFFIX and PREFIX-bcastSUFFIX
    python scripts/family_ratios.py "$1-allreduce${2:-}" hierarchical "$flat_allreduce" \
        --collective allreduce
    python scripts/family_ratios.py "$1-bcast${2:-}" hierarchical "$flat_bcast" --collective bcast
}
hierarchical_report() {
    echo "# sweeps at 2 nodes x 2 ranks, 64K-16M, BUDGET=$budget s per point, $launches launches:"
    echo "#   $run/h2x2-allreduce, $run/h2x2-bcast (links at 1gbit, MPICH over libfabric's tcp)"
    cat "$run/h2x2.load"
    echo "# python scripts/family_ratios.py RUN hierarchical FLAT; osu-dl-bench tune RUN"
    hierarchical_ratios "$run/h2x2"
    for collective in allreduce bcast; do
        osu-dl-bench tune "$run/h2x2-$collective" -o "$run/table-2x2-$collective.json"
    done
}
small_report() {
    echo "# sweeps at 2 nodes x 2 ranks, 8 B-32 KiB, BUDGET=$budget s per point, $launches launches:"
    echo "#   $run/h2x2-allreduce-small, $run/h2x2-bcast-small (links at 1gbit)"
    cat "$run/h2x2-small.load"
    hierarchical_ratios "$run/h2x2" -small
}
stability_report() {
    echo "# the first sweeps ended at $(date -u -r "$run/h2x2-bcast.log" +%H:%M:%S), the second"
    echo "#   began at $second UTC (links at 1gbit, BUDGET=$budget s per point, $launches launches)"
    cat "$run/h2x2.load" "$run/h2x2-B.load"
    for collective in allreduce bcast; do
        echo "# osu-dl-bench compare $run/h2x2-$collective $run/h2x2-$collective-B"
        osu-dl-bench compare "$run/h2x2-$collective" "$run/h2x2-$collective-B"
    done
}

layouts_report() {
    # layouts_report: 4 x 1 and 2 x 1 (one rank per node: hierarchical has no intra-node
    # part), the full size range
    for shape in 4x1 2x1; do
        echo "# sweep at ${shape} (nodes x ppn), 8 B-16 MiB: $run/l$shape (links at 1gbit)"
        cat "$run/l$shape.load"
        hierarchical_ratios "$run/l$shape"
    done
}
layout_sweeps() {
    # layout_sweeps SHAPE HOSTS NP
    echo "# load before the sweeps: $(load) on $(nproc) cores" >"$run/l$1.load"
    sweep "$2" "$3" allreduce "native,ring:seg=0,recursive_doubling,rabenseifner,tree,$hier_allreduce" \
        "$run/l$1-allreduce" 8:16M
    sweep "$2" "$3" bcast "native,binomial,chain,scatter_ring_allgather,$hier_bcast" \
        "$run/l$1-bcast" 8:16M
    echo "# load after the sweeps: $(load)" >>"$run/l$1.load"
}
library_report() {
    echo "# MPICH's own algorithms forced one by one (native:alg=all) at 2 nodes x 2 ranks,"
    echo "#   64K-16M, links at 1gbit: $run/lib2x2"
    osu-dl-bench tune "$run/lib2x2" -o "$run/table-lib2x2.json" --export mpich
    cat "$run/table-lib2x2.mpich.notes.txt" 2>/dev/null || true
}

if [[ $parts == *" fit "* ]]; then
    fit 250mbit 8:16M
    fit 1gbit 8:64M
fi
if [[ $parts == *" hierarchical "* ]]; then
    sweeps_2x2 ""
    with_command "$out/cluster_hierarchical_2x2.txt" hierarchical_report
fi
if [[ $parts == *" small "* ]]; then
    sweeps_2x2 -small 8:32K
    with_command "$out/cluster_hierarchical_2x2_small.txt" small_report
fi
if [[ $parts == *" accuracy "* ]]; then
    sweep "$hosts4" 4 allreduce,bcast \
        "native,ring:seg=0,recursive_doubling,rabenseifner,binomial,scatter_ring_allgather" \
        "$run/a4x1"
    with_command "$out/cluster_accuracy_4x1.txt" \
        osu-dl-bench model accuracy "$run/a4x1" --platform "$run/fit-1gbit"
fi
if [[ $parts == *" train "* ]]; then
    with_command "$out/cluster_train_2x2.txt" env OSU_DL_BENCH_HOSTS=$hosts2 \
        bash scripts/cluster_local.sh mpiexec -n 4 -ppn 2 osu-dl-bench train --validate \
        --table "$run/table-2x2-allreduce.json" --bcast hierarchical
fi
if [[ $parts == *" stability "* ]]; then
    # Ten minutes after the first sweeps ended, so that the machine's state can change.
    wait_s=$(($(stat -c %Y "$run/h2x2-bcast.log") + 600 - $(date +%s)))
    ((wait_s <= 0)) || sleep "$wait_s"
    second=$(date -u +%H:%M:%S)
    sweeps_2x2 -B
    with_command "$out/cluster_decisions_2x2.txt" stability_report
fi
if [[ $parts == *" layouts "* ]]; then
    layout_sweeps 4x1 "$hosts4" 4
    layout_sweeps 2x1 "$hosts2" 2
    with_command "$out/cluster_layouts.txt" layouts_report
fi
if [[ $parts == *" library "* ]]; then
    sweep "$hosts2" 4 allreduce,bcast "native,native:alg=all" "$run/lib2x2"
    with_command "$out/cluster_library_2x2.txt" library_report
fi
