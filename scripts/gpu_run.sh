#!/usr/bin/env bash
# Everything a short loan of a GPU node should measure, in one command, each step under a
# time limit so that one hung step costs only its own rows:
#   1. the device as nvidia-smi names it;
#   2. bandwidth on device buffers: NCCL allreduce and bcast on one rank per GPU (NP, the
#      GPUs cupy sees, as scripts/gpu_preflight.py counts them: p = 1 on a one-GPU node)
#      with the device's copy bound timed in the same run (bench --bounds), and MPI's
#      staged algorithms on MPI_NP = max(2, GPUs) ranks (two sharing the GPU of a one-GPU
#      node, unless its compute mode forbids it) with the staging copies timed in the same
#      run; one table of both (scripts/gpu_bandwidth.py);
#   3. training: train --device cuda at p = 1 against the same model and batch trained by
#      the plain PyTorch loop (scripts/plain_torch_loop.py), alternated over ROUNDS rounds
#      so a drift of the device hits both; train --validate on MPI_NP ranks;
#   4. scripts/gpu_smoke.sh (largest size SMOKE_MAX).
# Writes OUT/summary.txt (every table) and each step's log beside it. Exit 1 if a step
# failed, 77 where there is no GPU.
#
# Settings: PARTS (default "bandwidth training smoke"), RUN_DIR (default runs/gpu_run: a
# new folder, or one this script made, which it empties), BW_MAX (largest bandwidth size,
# default 1G), MPI_ALLREDUCE and MPI_BCAST (MPI's algorithms there), STEPS (training
# steps, default 50), ROUNDS (default 2), SMOKE_MAX (default 16M), STEP_TIMEOUT (seconds
# per step, default 300), NP and MPI_NP (the ranks above), PYTHON, MPIEXEC, WHEELS, DEPS
# (scripts/gpu_env.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${RUN_DIR:-runs/gpu_run}
PARTS=${PARTS:-bandwidth training smoke}
BW_MAX=${BW_MAX:-1G}
STEPS=${STEPS:-50}
ROUNDS=${ROUNDS:-2}
SMOKE_MAX=${SMOKE_MAX:-16M}
MPIEXEC=${MPIEXEC:-mpiexec}
LIMIT=(timeout "${STEP_TIMEOUT:-300}")
BW_COLLECTIVES=(allreduce bcast)
declare -A MPI_BW=(
    [allreduce]=${MPI_ALLREDUCE:-native,ring,rabenseifner}
    [bcast]=${MPI_BCAST:-native,binomial,scatter_ring_allgather}
)
# The workload of the training rows: ResNet-18 on 224 x 224 synthetic images, batch 64.
WORKLOAD=(--model resnet --data synthetic --depth 18 --image-size 224 --batch-size 64)

usage() { echo "gpu_run: $*" >&2; exit 2; }
for part in $PARTS; do
    case $part in bandwidth | training | smoke) ;; *) usage "PARTS: unknown part '$part' (bandwidth, training, smoke)" ;; esac
done
for name in STEPS ROUNDS; do
    [[ ${!name} =~ ^[0-9]+$ ]] || usage "$name=${!name}: expected a whole number"
done
# The folder is emptied: only a new one, or one whose summary says this script made it.
if [ -e "$OUT" ] && ! grep -qs '^# gpu_run ' "$OUT/summary.txt"; then
    usage "RUN_DIR=$OUT exists and is not a gpu_run folder: choose a new one"
fi

# grep reads every line: grep -q would stop at the first GPU, nvidia-smi then dies of
# SIGPIPE, and pipefail would count a node of several GPUs as one without any.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep '^GPU ' >/dev/null; then
    echo "gpu_run: no NVIDIA GPU here (nvidia-smi -L lists none): nothing to measure" >&2
    exit 77
fi
# shellcheck source=scripts/gpu_env.sh
. scripts/gpu_env.sh
OSU=("$PYTHON" -m osu_dl_bench)
rm -rf "$OUT"
mkdir -p "$OUT"
failed=0
SUMMARY=$OUT/summary.txt

say() { printf '%s\n' "$@" | tee -a "$SUMMARY"; }

# What a step's result (run_step, scripts/gpu_env.sh) means here: a failure is counted
# and named in the summary.
step_result() { # step_result NAME PASS|FAIL CODE LOG COMMAND...
    local name=$1 status=$2 code=$3 log=$4
    shift 4
    if [ "$status" = FAIL ]; then
        failed=1
        say "FAILED ($code): $name: $* (log $log)"
    fi
}

say "# gpu_run $(date -u +%FT%TZ): $(nvidia-smi -L | head -1)"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode,clocks.max.sm \
    --format=csv | tee -a "$SUMMARY"

# The ranks: NCCL on one per GPU, MPI on max(2, GPUs), from the GPUs cupy sees.
"$PYTHON" scripts/gpu_preflight.py >"$OUT/preflight.txt" 2>&1
gpus=$(preflight_value "$OUT/preflight.txt" gpus)
if [ -z "$gpus" ]; then
    say "FAILED: preflight: $(grep '^MISSING' "$OUT/preflight.txt" | tr '\n' ' ')(log $OUT/preflight.txt)"
    exit 1
fi
if [ "$gpus" = 0 ]; then
    echo "gpu_run: cupy sees no GPU (CUDA_VISIBLE_DEVICES?): nothing to measure" >&2
    exit 77
fi
gpu_ranks "$OUT/preflight.txt"
say "# $gpus GPU(s) seen by cupy: NCCL on $NP rank(s), MPI on $MPI_NP$([ "$MPI_CAPPED" = 1 ] && echo ' (the compute mode forbids sharing a GPU)')"

wanted() { [[ " $PARTS " == *" $1 "* ]]; }

# --- 2. bandwidth on device buffers ----------------------------------------------------
records=()
wanted bandwidth || BW_COLLECTIVES=()
for coll in "${BW_COLLECTIVES[@]}"; do
    json=$OUT/bw-nccl-$coll-p$NP.json
    run_step "nccl $coll p=$NP" "$OUT/bw-nccl-$coll-p$NP.txt" "$MPIEXEC" -n "$NP" "${OSU[@]}" bench \
        "$coll" -d cuda -a nccl --bounds -c -f -m "1K:$BW_MAX" -i 50 -x 5 -o "$json" &&
        records+=("$json")
done
for coll in "${BW_COLLECTIVES[@]}"; do
    json=$OUT/bw-mpi-$coll-p$MPI_NP.json
    run_step "mpi $coll p=$MPI_NP" "$OUT/bw-mpi-$coll-p$MPI_NP.txt" "$MPIEXEC" -n "$MPI_NP" "${OSU[@]}" \
        bench "$coll" -d cuda -a "${MPI_BW[$coll]}" --bounds -c -f -m "1K:$BW_MAX" -i 10 \
        -x 2 -o "$json" && records+=("$json")
done
if [ "${#records[@]}" -gt 0 ]; then
    say "" "# bench -d cuda --bounds -c -f -m 1K:$BW_MAX: nccl -n $NP (-i 50 -x 5); MPI -n $MPI_NP" \
        "# (-i 10 -x 2; allreduce ${MPI_BW[allreduce]}; bcast ${MPI_BW[bcast]})"
    "$PYTHON" scripts/gpu_bandwidth.py "${records[@]}" 2>&1 | tee -a "$SUMMARY"
fi

# --- 3. training -------------------------------------------------------------------------
wanted training || ROUNDS=0
[ "$ROUNDS" = 0 ] || say "" "# training, ${WORKLOAD[*]} --steps $STEPS --device cuda, $ROUNDS rounds alternated"
for round in $(seq 1 "$ROUNDS"); do
    log=$OUT/train-p1-round$round.txt
    run_step "train p=1 round $round" "$log" "$MPIEXEC" -n 1 "${OSU[@]}" train --device cuda \
        "${WORKLOAD[@]}" --steps "$STEPS" --progress off --json "$OUT/train-p1-round$round.json" &&
        say "round $round train -n 1: $(grep -E '^# img/s total' "$log" || echo 'no img/s line')"
    log=$OUT/plain-round$round.txt
    run_step "plain loop round $round" "$log" "$PYTHON" scripts/plain_torch_loop.py --device cuda \
        "${WORKLOAD[@]}" --steps "$STEPS" --progress off &&
        say "round $round plain loop: $(grep -E '^# img/s' "$log" || echo 'no img/s line')"
done
log=$OUT/validate-p$MPI_NP.txt
wanted training && run_step "train --validate p=$MPI_NP" "$log" "$MPIEXEC" -n "$MPI_NP" "${OSU[@]}" train \
    --device cuda --validate --steps 20 --progress off --json "$OUT/validate-p$MPI_NP.json" &&
    say "train --validate -n $MPI_NP (cnn, digits, $gpus GPU(s)): $(grep -E '^# validation' "$log")"

# --- 4. the smoke check ------------------------------------------------------------------
if wanted smoke; then
    say "" "# scripts/gpu_smoke.sh (MAX=$SMOKE_MAX, STEP_TIMEOUT=120)"
    OUT=$OUT/smoke MAX=$SMOKE_MAX STEP_TIMEOUT=120 bash scripts/gpu_smoke.sh >"$OUT/smoke.txt" 2>&1
    rc=$?
    [ "$rc" = 0 ] || failed=1
    sed -n '/^STEP /,$p' "$OUT/smoke.txt" | tee -a "$SUMMARY"
    grep -v '=' "$OUT/smoke/preflight.txt" 2>/dev/null | tee -a "$SUMMARY"
fi
say "gpu_run: $([ "$failed" = 0 ] && echo 'every step passed' || echo 'some steps FAILED') (logs in $OUT/)"
exit "$failed"
