#!/usr/bin/env bash
# The README's main job on the embedded MPICH: set up a virtual environment, run the OSU
# allreduce benchmark on 2 ranks, then sweep -> tune -> plot for allreduce and bcast on
# 2 and 4 ranks, printing the tuned-vs-native summary, and end with a short 2-rank training
# run whose broadcast and gradient buckets go through the selector with the table just
# built, checked against 1-process training. Everything lands in runs/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# torch pinned first: where the index has the CPU build (as here) it is ~200 MB; an
# unpinned torch would pull the multi-GB CUDA build. TORCH=none skips training.
if [ "${TORCH:-2.13.0}" != none ]; then
    .venv/bin/pip install -q "torch==${TORCH:-2.13.0}"
    .venv/bin/pip install -q -e '.[mpich,plot,train]'
else
    .venv/bin/pip install -q -e '.[mpich,plot]'
fi
export PATH="$PWD/.venv/bin:$PATH"
run=runs/quickstart
rm -rf "$run"
mkdir -p "$run"
mpiexec -n 2 osu-dl-bench bench allreduce -m 8:16M -f -c -o "$run/bench-allreduce.json"
osu-dl-bench sweep --np 2,4 --collectives allreduce,bcast -m 8:16M --budget "${BUDGET:-0.5}" \
    -o "$run/sweep"
osu-dl-bench tune "$run/sweep" -o "$run/table.json" --export openmpi,mpich
osu-dl-bench plot "$run/sweep" --table "$run/table.json"
if [ "${TORCH:-2.13.0}" != none ]; then
    # Small buckets (4 KiB first, 64 KiB cap) so the table picks per bucket size.
    mpiexec -n 2 osu-dl-bench train --validate --table "$run/table.json" --steps 20 \
        --first-bucket 4K --bucket-cap 64K --json "$run/train.json"
fi
echo "results, table, exports and plots in $run/"
