#!/usr/bin/env bash
# Whether a change left the readers of run directories as they were: tune (with both
# exports), plot, compare (with and without --table), select, model fit, model accuracy
# and model predict, run by OLD_REV's code and by this checkout's on the same two sweeps,
# then every text and JSON output compared with dates and folders masked, and every plot
# compared byte for byte.
#   bash scripts/same_outputs.sh OLD_REV RUN_A RUN_B [OUT]
# Prints one line per output that differs (with its first lines of difference) and exits
# 1 if any does; OUT (default a temporary folder) keeps both sides' outputs.
set -euo pipefail
usage="usage: same_outputs.sh OLD_REV RUN_A RUN_B [OUT]"
old_rev=${1:?$usage}
run_a=$(realpath "${2:?$usage}")
run_b=$(realpath "${3:?$usage}")
repo=$(cd "$(dirname "$0")/.." && pwd)
py="$repo/.venv/bin/python"
out=${4:-$(mktemp -d)}
mkdir -p "$out/old-tree" "$out/old" "$out/new"
git -C "$repo" archive "$old_rev" osu_dl_bench collectives | tar -x -C "$out/old-tree"

# run_side TREE SIDE: every reader on copies of the two sweeps (fit writes into its run).
run_side() {
    local tree=$1 side=$2 runs="$out/$2/runs"
    mkdir -p "$runs"
    cp -r "$run_a" "$runs/A"
    cp -r "$run_b" "$runs/B"
    rm -f "$runs"/*/sweep.lock "$runs"/*/platform.json
    cd "$out/$side"
    obd() { PYTHONPATH=$tree MPLBACKEND=Agg "$py" -m osu_dl_bench "$@"; }
    for r in A B; do
        obd tune "$runs/$r" -o "tab_$r.json" --export mpich,openmpi >"tune_$r.txt" 2>&1 || true
        obd plot "$runs/$r" --table "tab_$r.json" -o "plot_$r" >"plot_$r.txt" 2>&1 || true
    done
    obd compare "$runs/A" "$runs/B" >compare.txt 2>&1 || true
    obd compare "$runs/A" "$runs/B" --table tab_A.json >compare_table.txt 2>&1 || true
    obd select --np 2 --size 8,64K,1M --table tab_A.json >select.txt 2>&1 || true
    obd model predict --platform ib-hdr200 --np 64 --ppn 8 -o pred.json >predict.txt 2>&1 || true
    obd model fit "$runs/A" >model_fit.txt 2>&1 || true
    cp "$runs/A/platform.json" platform_A.json 2>/dev/null || true
    obd model accuracy "$runs/B" --platform platform_A.json >model_accuracy.txt 2>&1 || true
    rm -rf "$runs"
}
run_side "$out/old-tree" old
run_side "$repo" new

# masked FILE SIDE: the file with its side's folders and every date replaced by words.
masked() {
    sed -E "s#$out/old-tree|$repo#SRC#g; s#$out/$2#OUT#g; \
        s#[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+(\+00:00|Z)?#DATE#g" "$out/$2/$1"
}
status=0
for file in $(cd "$out/old" && find . -type f ! -name '*.png' | sort); do
    if ! diff <(masked "$file" old) <(masked "$file" new) >"$out/diff.txt" 2>&1; then
        echo "differs: $file"
        head -8 "$out/diff.txt"
        status=1
    fi
done
for png in $(cd "$out/old" && find . -name '*.png' | sort); do
    cmp -s "$out/old/$png" "$out/new/$png" || { echo "differs: $png"; status=1; }
done
echo "# $(cd "$out/old" && find . -type f | wc -l) outputs compared; kept in $out"
exit $status
