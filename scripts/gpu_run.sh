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
#   4. scripts/gpu_smoke.sh (largest size SMOKE_MAX);
#   and the parts not run by default (PARTS names them; the order of PARTS is the order run):
#   copybound: NCCL allreduce at p = 1 beside the device's memcpy and a copy kernel, timed
#      in the same interleaved rounds, LAUNCHES launches, their paired ratios with 95%
#      intervals (scripts/gpu_bandwidth.py --paired): at p = 1 NCCL is one cudaMemcpyAsync;
#   hostdevice: host-device copies each way from pinned and pageable memory
#      (scripts/gpu_host_device.py), and the staged native allreduce's small messages at
#      p = 1 and p = 2 (two processes on one GPU), with MPS too where
#      nvidia-cuda-mps-control exists;
#   ddp: train-bench --device cuda at p = 1: the trainer on NCCL (its GPU default) beside
#      DDP over NCCL and over Gloo, with intervals over rounds;
#   overlap: train --device cuda on MPI_NP ranks, where a reduction happens (staged MPI
#      where they share a GPU): the gradient reduction's busy, exposed and hidden time from
#      CUDA events.
# Writes OUT/summary.txt (every table) and each step's log beside it. Exit 1 if a step
# failed, 77 where there is no GPU.
#
# Settings: PARTS (default "bandwidth training smoke"; also copybound, hostdevice, ddp,
# overlap), LAUNCHES (copybound's, default 3), SMOKE_TIMEOUT (the smoke check's seconds per
# step, default 120), RUN_DIR (default runs/gpu_run: a
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
LAUNCHES=${LAUNCHES:-3}
SMOKE_TIMEOUT=${SMOKE_TIMEOUT:-120}
MPIEXEC=${MPIEXEC:-mpiexec}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
LIMIT=(timeout "$STEP_TIMEOUT")
BW_COLLECTIVES=(allreduce bcast)
declare -A MPI_BW=(
    [allreduce]=${MPI_ALLREDUCE:-native,ring,rabenseifner}
    [bcast]=${MPI_BCAST:-native,binomial,scatter_ring_allgather}
)
# The workload of the training rows: ResNet-18 on 224 x 224 synthetic images, batch 64
# (train-bench's images are synthetic: it takes no --data).
MODEL=(--model resnet --depth 18 --image-size 224 --batch-size 64)
WORKLOAD=(--data synthetic "${MODEL[@]}")

usage() { echo "gpu_run: $*" >&2; exit 2; }
for part in $PARTS; do
    case $part in
    bandwidth | training | smoke | copybound | hostdevice | ddp | overlap) ;;
    *) usage "PARTS: unknown part '$part' (bandwidth, training, smoke, copybound, hostdevice, ddp, overlap)" ;;
    esac
done
# NAME LOW HIGH: whole numbers only (a time limit of 0 would be none: timeout 0 waits forever).
for bounds in "STEPS 1 100000" "ROUNDS 0 1000" "LAUNCHES 1 100" "SMOKE_TIMEOUT 1 86400" \
    "STEP_TIMEOUT 1 86400"; do
    read -r name low high <<<"$bounds"
    value=${!name}
    if ! [[ $value =~ ^[0-9]{1,6}$ ]] || ((10#$value < low || 10#$value > high)); then
        usage "$name=$value: expected a whole number from $low to $high"
    fi
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
    say "FAILED: preflight: $(grep -E '^(MISSING|ERROR)' "$OUT/preflight.txt" | tr '\n' ' ')(log $OUT/preflight.txt)"
    exit 1
fi
if [ "$gpus" = 0 ]; then
    echo "gpu_run: cupy sees no GPU (CUDA_VISIBLE_DEVICES?): nothing to measure" >&2
    exit 77
fi
gpu_ranks "$OUT/preflight.txt"
say "# $gpus GPU(s) seen by cupy: NCCL on $NP rank(s), MPI on $MPI_NP$([ "$MPI_CAPPED" = 1 ] && echo ' (the compute mode forbids sharing a GPU)')"

# --- 2. bandwidth on device buffers ----------------------------------------------------
part_bandwidth() {
    records=()
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
        "$PYTHON" scripts/gpu_bandwidth.py "${records[@]}" 2>&1 | tee -a "$SUMMARY" || failed=1
    fi
}

# --- 3. training -------------------------------------------------------------------------
part_training() {
    [ "$ROUNDS" = 0 ] || say "" "# training, ${WORKLOAD[*]} --steps $STEPS --device cuda, $ROUNDS rounds alternated"
    for round in $(seq 1 "$ROUNDS"); do
        log=$OUT/train-p1-round$round.txt
        run_step "train p=1 round $round" "$log" "$MPIEXEC" -n 1 "${OSU[@]}" train --device cuda \
            "${WORKLOAD[@]}" --steps "$STEPS" --progress off --json "$OUT/train-p1-round$round.json" &&
            say "round $round train -n 1 ($(grep -E '^# allreduce:' "$log" | cut -c3-60)): $(grep -E '^# img/s total' "$log" || echo 'no img/s line')"
        log=$OUT/plain-round$round.txt
        run_step "plain loop round $round" "$log" "$PYTHON" scripts/plain_torch_loop.py --device cuda \
            "${WORKLOAD[@]}" --steps "$STEPS" --progress off &&
            say "round $round plain loop: $(grep -E '^# img/s' "$log" || echo 'no img/s line')"
    done
    log=$OUT/validate-p$MPI_NP.txt
    run_step "train --validate p=$MPI_NP" "$log" "$MPIEXEC" -n "$MPI_NP" "${OSU[@]}" train \
        --device cuda --validate --steps 20 --progress off --json "$OUT/validate-p$MPI_NP.json" &&
        say "train --validate -n $MPI_NP (cnn, digits, $gpus GPU(s)): $(grep -E '^# validation' "$log")"
}

# --- 4. the smoke check ------------------------------------------------------------------
part_smoke() {
    say "" "# scripts/gpu_smoke.sh (MAX=$SMOKE_MAX, STEP_TIMEOUT=$SMOKE_TIMEOUT)"
    OUT=$OUT/smoke MAX=$SMOKE_MAX STEP_TIMEOUT=$SMOKE_TIMEOUT bash scripts/gpu_smoke.sh >"$OUT/smoke.txt" 2>&1
    rc=$?
    [ "$rc" = 0 ] || failed=1
    sed -n '/^STEP /,$p' "$OUT/smoke.txt" | tee -a "$SUMMARY"
    grep -v '=' "$OUT/smoke/preflight.txt" 2>/dev/null | tee -a "$SUMMARY"
}

# --- copybound: NCCL at p = 1 and the device's memcpy in the same rounds ---------------
part_copybound() {
    local files=() launch json
    say "" "# NCCL allreduce at p = 1 beside the device's memcpy (cudaMemcpyAsync device to device, what" \
        "# NCCL does at p = 1) and a copy kernel, timed in the same interleaved rounds, $LAUNCHES launches:" \
        "# mpiexec -n 1 ... bench allreduce -d cuda -a nccl --bounds -c -f -m 1K:$BW_MAX -i 50 -x 5"
    for launch in $(seq 1 "$LAUNCHES"); do
        json=$OUT/copybound-$launch.json
        run_step "nccl and memcpy, launch $launch" "$OUT/copybound-$launch.txt" "$MPIEXEC" -n 1 \
            "${OSU[@]}" bench allreduce -d cuda -a nccl --bounds -c -f -m "1K:$BW_MAX" -i 50 -x 5 \
            -o "$json" && files+=("$json")
    done
    [ "${#files[@]}" -gt 0 ] || return 0
    # A table that cannot be made is a failed step too (pipefail: the script's status).
    "$PYTHON" scripts/gpu_bandwidth.py --paired nccl memcpy "${files[@]}" 2>&1 | tee -a "$SUMMARY" ||
        failed=1
    "$PYTHON" scripts/gpu_bandwidth.py --paired copy-kernel memcpy "${files[@]}" 2>&1 |
        tee -a "$SUMMARY" || failed=1
    say "" "# the first launch's bandwidth table"
    "$PYTHON" scripts/gpu_bandwidth.py "${files[0]}" 2>&1 | tee -a "$SUMMARY" || failed=1
}

# --- hostdevice: host-device copies, and the staged call's small-message cost -----------
part_hostdevice() {
    local log=$OUT/hostdevice.txt n
    run_step "host-device copies" "$log" "$MPIEXEC" -n 1 "$PYTHON" scripts/gpu_host_device.py \
        -m "1K:$BW_MAX" --json "$OUT/hostdevice.json" && say "" "$(grep -v '^+ ' "$log")"
    say "" "# the staged native allreduce (MPI not CUDA-aware) and its staging copies, small messages:" \
        "# bench allreduce -d cuda -a native --bounds -f -m 8:64K -i 200 -x 20 at p = 1 and p = 2 (one GPU)"
    for n in 1 2; do
        log=$OUT/staged-p$n.txt
        run_step "staged native p=$n" "$log" "$MPIEXEC" -n "$n" "${OSU[@]}" bench allreduce -d cuda \
            -a native --bounds -f -m 8:64K -i 200 -x 20 && say "" "## p = $n" "$(grep -v '^+ ' "$log")"
    done
    if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
        say "" "# MPS: nvidia-cuda-mps-control is not on this node: the p = 2 run under MPS was not measured"
        return 0
    fi
    export CUDA_MPS_PIPE_DIRECTORY=$PWD/$OUT/mps/pipe CUDA_MPS_LOG_DIRECTORY=$PWD/$OUT/mps/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if timeout 20 nvidia-cuda-mps-control -d >"$OUT/mps-start.txt" 2>&1; then
        log=$OUT/staged-p2-mps.txt
        run_step "staged native p=2 under MPS" "$log" timeout 90 "$MPIEXEC" -n 2 "${OSU[@]}" bench \
            allreduce -d cuda -a native --bounds -f -m 8:64K -i 200 -x 20 &&
            say "" "## p = 2 under MPS" "$(grep -v '^+ ' "$log")"
        echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
    else
        say "" "# MPS: the control daemon did not start ($(tr '\n' ' ' <"$OUT/mps-start.txt")): not measured"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

# --- ddp: the trainer's NCCL default beside DDP over NCCL and over Gloo -------------------
part_ddp() {
    local log=$OUT/train-bench-p1.txt
    say "" "# train-bench --device cuda --np 1 ${MODEL[*]} --launches 1 --rounds 4 --steps 10 --warmup 3" \
        "#   --only nccl,ddp-nccl,ddp-gloo (native always): img/s per configuration, intervals over rounds"
    run_step "train-bench p=1" "$log" "${OSU[@]}" train-bench --device cuda --np 1 "${MODEL[@]}" \
        --launches 1 --rounds 4 --steps 10 --warmup 3 --only nccl,ddp-nccl,ddp-gloo \
        --out "$OUT/train-bench-p1" && say "$(cat "$OUT/train-bench-p1.txt")"
}

# --- overlap: where a reduction happens, timed with CUDA events ---------------------------
part_overlap() {
    local log=$OUT/overlap-p$MPI_NP.txt
    run_step "train overlap p=$MPI_NP" "$log" "$MPIEXEC" -n "$MPI_NP" "${OSU[@]}" train --device cuda \
        "${WORKLOAD[@]}" --steps 30 --progress off --json "$OUT/overlap-p$MPI_NP.json" &&
        say "" "# train --device cuda ${WORKLOAD[*]} --steps 30 on $MPI_NP ranks ($gpus GPU(s))" \
            "$(grep -E '^# (allreduce|img/s total|communication|.*staged native)' "$log")"
}

for part in $PARTS; do
    "part_$part"
done
say "gpu_run: $([ "$failed" = 0 ] && echo 'every step passed' || echo 'some steps FAILED') (logs in $OUT/)"
exit "$failed"
