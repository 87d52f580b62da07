#!/usr/bin/env bash
# The GPU path on a real GPU node, in one command: preflight (every dependency imported,
# GPUs counted by cupy, torch >= 2.10, compute mode, CUDA-aware MPI or not), one device
# per rank, bench allreduce and bcast -d cuda -a all -c at 8 B-64 MiB for
# float32/float16/int32, a race stress (ring and Rabenseifner at 16-64 MiB, 20 validated
# runs, zero wrong elements), NCCL bandwidth, a short -d cuda sweep -> tune -> bench -a
# tuned, and training steps on 1 and 2 ranks. Prints one summary table and exits 1 if any
# step failed, 77 where there is no GPU.
#
# Runs from this checkout as it is (python3 -m osu_dl_bench with the checkout on
# PYTHONPATH; nothing installed). A node without an MPI library or jsonschema gets them
# from carried wheels (scripts/gpu_env.sh says how).
#
# Uses every GPU cupy sees: NCCL runs on one rank per GPU (p = 1 on a one-GPU machine, so
# its bus bandwidth, 0 by definition, is replaced by algbw); MPI algorithms run on max(2,
# GPUs) ranks, sharing GPUs where there are fewer (unless the compute mode forbids it),
# and stage through host memory where MPI is not CUDA-aware (the bench output says so;
# the race stress, which targets device memory, is then N/A). Settings: PYTHON (default
# python3), NP (ranks for NCCL, default the GPU count), MPI_NP (ranks for MPI algorithms),
# MPIEXEC (default mpiexec), OUT (default runs/gpu_smoke), MAX (largest size, default
# 64M), REPEATS (race stress runs, default 20), RACE (their sizes, default 16M:64M),
# SWEEP_MAX (the sweep's and the tuned bench's largest size, default 1M), STEP_TIMEOUT
# (seconds a step may take before it counts as failed, default 1800), WHEELS (default
# wheels), DEPS (default .gpu-deps).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PYTHON=${PYTHON:-python3}
MPIEXEC=${MPIEXEC:-mpiexec}
OUT=${OUT:-runs/gpu_smoke}
MAX=${MAX:-64M}
REPEATS=${REPEATS:-20}
RACE=${RACE:-16M:64M}
SWEEP_MAX=${SWEEP_MAX:-1M}
# A hung step is stopped and counted as failed.
LIMIT=(timeout "${STEP_TIMEOUT:-1800}")
OSU=("$PYTHON" -m osu_dl_bench)

# grep reads every line: grep -q would stop at the first GPU, nvidia-smi then dies of
# SIGPIPE, and pipefail would count a node of several GPUs as one without any.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep '^GPU ' >/dev/null; then
    echo "gpu_smoke: no NVIDIA GPU here (nvidia-smi -L lists none): nothing to check" >&2
    exit 77
fi

# --- the checkout and the carried dependencies on the paths --------------------------------
# shellcheck source=scripts/gpu_env.sh
. scripts/gpu_env.sh

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

# What a step's result (run_step, scripts/gpu_env.sh) means here: its row in the summary.
step_result() { # step_result NAME PASS|FAIL CODE LOG COMMAND...
    if [ "$2" = PASS ]; then
        record "$1" PASS "$4"
    else
        record "$1" FAIL "$4 (exit or validation; see the log)"
    fi
}

summary() {
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
    exit 0
}

# --- preflight ------------------------------------------------------------------------
"$PYTHON" scripts/gpu_preflight.py >"$OUT/preflight.txt" 2>&1
rc=$?
value() { preflight_value "$OUT/preflight.txt" "$1"; }
gpus=$(value gpus)
if [ -z "$gpus" ]; then # a dependency is missing: nothing else can run
    record preflight FAIL "$OUT/preflight.txt"
    grep -E '^(MISSING|ERROR)' "$OUT/preflight.txt" >&2
    summary
fi
if [ "$gpus" = 0 ]; then
    echo "gpu_smoke: cupy sees no GPU (CUDA_VISIBLE_DEVICES?): nothing to check" >&2
    exit 77
fi
if [ "$rc" = 0 ]; then
    record preflight PASS "$(grep -v '=' "$OUT/preflight.txt" | tr '\n' ';' | cut -c1-200)"
else
    record preflight FAIL "$OUT/preflight.txt"
fi
aware=$(value aware)
share=$(value share)
torch_cuda=$(value torch_cuda)
torch_ok=$(value torch_ok)
gpu_ranks "$OUT/preflight.txt"
if [ "$MPI_CAPPED" = 1 ]; then
    record "ranks sharing a GPU" SKIP "compute mode forbids it (preflight): MPI steps on p=$MPI_NP"
fi

# One device per rank, checked by UUID the way bench chooses GPUs (a file, since mpiexec
# gives stdin to rank 0 alone; it finds collectives through PYTHONPATH).
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
            "$MPIEXEC" -n "$MPI_NP" "${OSU[@]}" bench "$coll" -d cuda -a all -c \
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
if [ "$aware" = 0 ]; then
    # Staged, the algorithms run on host mirrors: no device memory for a kernel to race.
    record "race stress" N/A "MPI is not CUDA-aware: ring and rabenseifner run on host copies"
else
    wrong_runs=0
    for i in $(seq 1 "$REPEATS"); do
        if ! "${LIMIT[@]}" "$MPIEXEC" -n "$MPI_NP" "${OSU[@]}" bench allreduce -d cuda \
            -a ring,rabenseifner -c -m "$RACE" -i 2 -x 1 >"$OUT/race-$i.txt" 2>&1 ||
            grep -qE '(^|[[:space:]])Fail([[:space:]]|$)' "$OUT/race-$i.txt"; then
            wrong_runs=$((wrong_runs + 1))
        fi
    done
    if [ "$wrong_runs" = 0 ]; then
        record "race stress x$REPEATS" PASS "ring, rabenseifner at $RACE: zero wrong"
    else
        record "race stress x$REPEATS" FAIL "$wrong_runs runs with wrong elements or errors ($OUT/race-*.txt)"
    fi
fi

# --- NCCL bandwidth -------------------------------------------------------------------------
log="$OUT/nccl-busbw.txt"
if "${LIMIT[@]}" "$MPIEXEC" -n "$NP" "${OSU[@]}" bench allreduce -d cuda -a nccl -c -f \
    -m "8:$MAX" -i 20 -x 5 >"$log" 2>&1 && ! grep -qE '(^|[[:space:]])Fail([[:space:]]|$)' "$log"; then
    row=$(grep -vE '^#|^$' "$log" | tail -1)
    if [ "$NP" -gt 1 ]; then
        record "nccl allreduce p=$NP" PASS "busbw at $MAX: $(awk '{print $(NF-1)}' <<<"$row") GB/s"
    else # busbw = algbw * 2(p-1)/p is 0 at p = 1: algbw says what one GPU did
        record "nccl allreduce p=1" PASS "algbw at $MAX: $(awk '{print $(NF-2)}' <<<"$row") GB/s (busbw is 0 at p=1)"
    fi
else
    record "nccl allreduce p=$NP" FAIL "$log"
fi

# --- sweep -> tune -> bench -a tuned ---------------------------------------------------------
run_step "sweep -d cuda" "$OUT/sweep.txt" "${OSU[@]}" sweep --np "$MPI_NP" \
    --collectives allreduce,bcast -m "8:$SWEEP_MAX" -d cuda --budget 0.05 --launches 1 -o "$OUT/sweep"
run_step "tune" "$OUT/tune.txt" "${OSU[@]}" tune "$OUT/sweep" -o "$OUT/table.json"
run_step "bench -a tuned" "$OUT/tuned.txt" "$MPIEXEC" -n "$MPI_NP" "${OSU[@]}" bench \
    allreduce -d cuda -a tuned --table "$OUT/table.json" -c -m "8:$SWEEP_MAX" -i 10 -x 2

# --- training steps: one rank, and two (sharing the GPU where there is one) ---------------
for n in 1 2; do
    name="train --device cuda -n $n"
    if [ "$torch_ok" != 1 ]; then
        record "$name" FAIL "torch older than 2.10 (preflight)"
    elif [ "$torch_cuda" != 1 ]; then
        record "$name" SKIP "torch sees no GPU (torch.cuda.is_available() is False)"
    elif [ "$n" -gt "$gpus" ] && [ "$share" = no ]; then
        record "$name" SKIP "$n ranks on $gpus GPU(s): the compute mode forbids sharing"
    else
        run_step "$name" "$OUT/train-$n.txt" "$MPIEXEC" -n "$n" "${OSU[@]}" train \
            --device cuda --data synthetic --steps 2 --json "$OUT/train-$n.json"
    fi
done

summary
