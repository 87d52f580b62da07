#!/usr/bin/env bash
# The README's main job: set up a virtual environment with the embedded MPICH and run the
# allreduce and bcast benchmarks on 2 ranks, validated, keeping the records in runs/.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[mpich]'
export PATH="$PWD/.venv/bin:$PATH"
mkdir -p runs/quickstart
for collective in allreduce bcast; do
    mpiexec -n 2 osu-dl-bench bench "$collective" -m 8:16M -f -c \
        -o "runs/quickstart/$collective.json"
done
echo "records written to runs/quickstart/"
