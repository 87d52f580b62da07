#!/usr/bin/env bash
# The GPU path on a real GPU node, in one command (issue 17): preflight (versions,
# CUDA-aware MPI or not, one device per rank), bench allreduce and bcast -d cuda -a all -c
# at 8 B-64 MiB for float32/float16/int32, a race stress (ring and Rabenseifner at
# 16-64 MiB, 20 validated runs, zero wrong elements), NCCL bus bandwidth, a short -d cuda
# sweep -> tune -> bench -a tuned, and a 1-GPU training step. Prints one summary table and
# exits 1 if any step failed, 77 where there is no GPU.
#
# Uses every GPU of the node (nvidia-smi -L): NCCL runs on one rank per GPU (p = 1 on a
# one-GPU machine); MPI algorithms run on max(2, GPUs) ranks, sharing GPUs where there are
# fewer, and stage through host memory where MPI is not CUDA-aware (the bench output says
# so). Settings: NP (ranks for NCCL, default the GPU count), MPI_NP (ranks for MPI
# algorithms), MPIEXEC (default mpiexec), OUT (default runs/gpu_smoke), MAX (largest size,
# default 64M), REPEATS (race stress runs, default 20), RACE (their sizes, default
# 16M:64M), STEP_TIMEOUT (seconds a step may take before it counts as failed, default 1800).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if [ -x .venv/bin/osu-dl-bench ]; then
    export PATH="$PWD/.venv/bin:$PATH"
fi
PYTHON=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-mpiexec}
OUT=${OUT:-runs/gpu_smoke}
MAX=${MAX:-64M}
REPEATS=${REPEATS:-20}
RACE=${RACE:-16M:64M}
# A hung step is stopped and counted as failed.
LIMIT=(timeout "${STEP_TIMEOUT:-1800}")

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if [ "${gpus:-0}" -lt 1 ]; then
    echo "gpu_smoke: no NVIDIA GPU here (nvidia-smi -L lists none): nothing to check" >&2
    exit 77
fi
NP=${NP:-$gpus}
MPI_NP=${MPI_NP:-$((gpus > 2 ? gpus : 2))}
rm -rf "$OUT"
mkdir -p "$OUT"

steps=()
statuses=()
details=()
failed=0

record() { # record STEP STATUS DETAIL
    steps+=("$1")
    statuses+=("$2")
    details+=("$3")
    if [ "$2" = FAIL ]; then
        failed=1
    fi
    printf '== %-28s %-5s %s\n' "$1" "$2" "$3"
}

# run_step NAME LOG COMMAND...: PASS if it exits 0 and its log has no failed validation.
run_step() {
    local name=$1 log=$2
    shift 2
    if "${LIMIT[@]}" "$@" >"$log" 2>&1 && ! grep -qE '(^|[[:space:]])Fail([[:space:]]|$)|DATA VALIDATION ERROR' "$log"; then
        record "$name" PASS "$log"
    else
        record "$name" FAIL "$log (exit or validation; see the log)"
    fi
}

# --- preflight ------------------------------------------------------------------------
"$PYTHON" - >"$OUT/preflight.txt" 2>&1 <<'EOF'
import cupy, mpi4py, numpy
from mpi4py import MPI
from cupy.cuda import nccl, runtime
from collectives import device
print("numpy", numpy.__version__, "| cupy", cupy.__version__, "| mpi4py", mpi4py.__version__)
print("MPI:", MPI.Get_library_version().splitlines()[0])
print("CUDA runtime", runtime.runtimeGetVersion(), "| driver", runtime.driverGetVersion())
print("NCCL", nccl.get_version() if getattr(nccl, "available", False) else "missing")
print("GPUs visible:", runtime.getDeviceCount())
print("MPIX_Query_cuda_support:", device.query_cuda_support())
print("CUDA-aware MPI (as used):", device.cuda_aware())
EOF
rc=$?
if [ "$rc" = 0 ]; then
    record preflight PASS "$(tr '\n' ';' <"$OUT/preflight.txt" | cut -c1-200)"
else
    record preflight FAIL "$OUT/preflight.txt"
fi
aware=$(grep -c 'CUDA-aware MPI (as used): True' "$OUT/preflight.txt" || true)

# One device per rank, checked by UUID the way bench chooses GPUs (a file, since mpiexec
# gives stdin to rank 0 alone).
cat >"$OUT/devices.py" <<'EOF'
from mpi4py import MPI
from collectives import device
comm = MPI.COMM_WORLD
index = device.select_local_gpu(comm)
uuids = comm.gather(device.device_uuid(index), root=0)
if comm.Get_rank() == 0:
    reason = device.gpu_sharing_reason()
    print("ranks", comm.Get_size(), "distinct GPUs", len(set(uuids)), "sharing:", reason)
    raise SystemExit(1 if reason else 0)
EOF
"${LIMIT[@]}" "$MPIEXEC" -n "$NP" "$PYTHON" "$OUT/devices.py" >"$OUT/devices.txt" 2>&1
rc=$?
if [ "$rc" = 0 ]; then
    record "one GPU per rank (p=$NP)" PASS "$(tail -1 "$OUT/devices.txt")"
else
    record "one GPU per rank (p=$NP)" FAIL "$OUT/devices.txt"
fi

# --- every algorithm, validated ---------------------------------------------------------
for coll in allreduce bcast; do
    for dtype in float32 float16 int32; do
        run_step "$coll $dtype p=$MPI_NP" "$OUT/bench-$coll-$dtype.txt" \
            "$MPIEXEC" -n "$MPI_NP" osu-dl-bench bench "$coll" -d cuda -a all -c \
            -m "8:$MAX" -T "$dtype" -i 10 -x 2
    done
done
if [ "$aware" = 0 ]; then
    if grep -q 'stage through pinned host buffers' "$OUT/bench-allreduce-float32.txt"; then
        record "staging stated" PASS "MPI is not CUDA-aware: staged through host"
    else
        record "staging stated" FAIL "no staging line in bench-allreduce-float32.txt"
    fi
fi

# --- race stress: the device-ready points of ring and Rabenseifner ------------------------
wrong_runs=0
for i in $(seq 1 "$REPEATS"); do
    if ! "${LIMIT[@]}" "$MPIEXEC" -n "$MPI_NP" osu-dl-bench bench allreduce -d cuda -a ring,rabenseifner \
        -c -m "$RACE" -i 2 -x 1 >"$OUT/race-$i.txt" 2>&1 ||
        grep -qE '(^|[[:space:]])Fail([[:space:]]|$)' "$OUT/race-$i.txt"; then
        wrong_runs=$((wrong_runs + 1))
    fi
done
if [ "$wrong_runs" = 0 ]; then
    record "race stress x$REPEATS" PASS "ring, rabenseifner at $RACE: zero wrong"
else
    record "race stress x$REPEATS" FAIL "$wrong_runs runs with wrong elements or errors ($OUT/race-*.txt)"
fi

# --- NCCL bus bandwidth -------------------------------------------------------------------
log="$OUT/nccl-busbw.txt"
if "${LIMIT[@]}" "$MPIEXEC" -n "$NP" osu-dl-bench bench allreduce -d cuda -a nccl -c -f -m "8:$MAX" \
    -i 20 -x 5 >"$log" 2>&1 && ! grep -qE '(^|[[:space:]])Fail([[:space:]]|$)' "$log"; then
    busbw=$(grep -vE '^#|^$' "$log" | tail -1 | awk '{print $(NF-1)}')
    record "nccl allreduce p=$NP" PASS "busbw at $MAX: ${busbw} GB/s"
else
    record "nccl allreduce p=$NP" FAIL "$log"
fi

# --- sweep -> tune -> bench -a tuned ---------------------------------------------------------
run_step "sweep -d cuda" "$OUT/sweep.txt" osu-dl-bench sweep --np "$MPI_NP" \
    --collectives allreduce,bcast -m 8:1M -d cuda --budget 0.05 --launches 1 -o "$OUT/sweep"
run_step "tune" "$OUT/tune.txt" osu-dl-bench tune "$OUT/sweep" -o "$OUT/table.json"
run_step "bench -a tuned" "$OUT/tuned.txt" "$MPIEXEC" -n "$MPI_NP" osu-dl-bench bench \
    allreduce -d cuda -a tuned --table "$OUT/table.json" -c -m 8:1M -i 10 -x 2

# --- one training step on one GPU -------------------------------------------------------------
if osu-dl-bench train --help 2>/dev/null | grep -q -- '--device {[^}]*cuda'; then
    run_step "train --device cuda" "$OUT/train.txt" "$MPIEXEC" -n 1 osu-dl-bench train \
        --device cuda --data synthetic --steps 1 --json "$OUT/train.json"
else
    record "train --device cuda" SKIP "train --device cuda not available"
fi

# --- summary ------------------------------------------------------------------------------
echo
printf '%-30s %-5s %s\n' STEP STATUS DETAIL
for i in "${!steps[@]}"; do
    printf '%-30s %-5s %s\n' "${steps[$i]}" "${statuses[$i]}" "${details[$i]}"
done | tee "$OUT/summary.txt"
if [ "$failed" != 0 ]; then
    echo "gpu_smoke: FAILED (logs in $OUT/)"
    exit 1
fi
echo "gpu_smoke: all steps passed (logs in $OUT/)"
