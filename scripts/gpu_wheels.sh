#!/usr/bin/env bash
# Fetch, on a machine with internet, the wheels a bare GPU node lacks for
# scripts/gpu_smoke.sh: the mpich wheel (MPI library, mpiexec) and jsonschema with its
# dependencies (referencing, jsonschema-specifications, rpds-py, attrs, typing-extensions).
# They land in wheels/ (ignored by git); copy the checkout with that folder to the node,
# where gpu_smoke.sh installs them into .gpu-deps/ with pip --no-index, offline.
#
# Settings: PY (the node's Python version, default 3.12), ARCH (x86_64 or aarch64, default
# x86_64), WHEELS (the folder, default wheels), PIP (default: python3 -m pip).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-3.12}
ARCH=${ARCH:-x86_64}
WHEELS=${WHEELS:-wheels}
read -r -a PIP <<<"${PIP:-python3 -m pip}"
# No dependency resolution: the node has numpy, mpi4py and the rest; each name is listed.
NAMES=(mpich jsonschema referencing jsonschema-specifications rpds-py attrs typing-extensions)
platforms=()
for tag in manylinux_2_34 manylinux_2_28 manylinux_2_17 manylinux2014; do
    platforms+=(--platform "${tag}_${ARCH}")
done
mkdir -p "$WHEELS"
"${PIP[@]}" download --quiet --no-deps --only-binary=:all: --python-version "$PY" \
    --implementation cp "${platforms[@]}" -d "$WHEELS" "${NAMES[@]}"
ls -1 "$WHEELS"
echo "gpu_wheels: $(ls -1 "$WHEELS" | wc -l) wheels for Python $PY on $ARCH in $WHEELS/"
