#!/usr/bin/env bash
# The README's main job on the embedded MPICH: set up a virtual environment, run the OSU
# allreduce benchmark on 2 ranks, then sweep -> tune -> plot for allreduce and bcast on
# 2 and 4 ranks, printing the tuned-vs-native summary. Everything lands in runs/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[mpich]'
export PATH="$PWD/.venv/bin:$PATH"
run=runs/quickstart
rm -rf "$run"
mkdir -p "$run"
mpiexec -n 2 osu-dl-bench bench allreduce -m 8:16M -f -c -o "$run/bench-allreduce.json"
osu-dl-bench sweep --np 2,4 --collectives allreduce,bcast -m 8:16M --budget "${BUDGET:-0.5}" \
    -o "$run/sweep"
osu-dl-bench tune "$run/sweep" -o "$run/table.json" --export openmpi,mpich
osu-dl-bench plot "$run/sweep" --table "$run/table.json"
echo "results, table, exports and plots in $run/"
