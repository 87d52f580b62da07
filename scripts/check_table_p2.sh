#!/usr/bin/env bash
# The table checked in training, one node, p = 2 (docs/training.md): the quick start's
# training (cnn on digits, buckets 4K first / 64K cap, -b 64) with --check-table on a
# table, the check placed first (plain steps after it) and later (plain steps before it),
# alternated over RUNS pairs; then per bucket size whether the table's choice holds, the
# null control's ratio to native, and the check's cost as a share of 1,000 plain steps.
# Usage: scripts/check_table_p2.sh TABLE OUT_DIR [RUNS]   (default 2 pairs)
set -euo pipefail
table=${1:?TABLE}
out=${2:?OUT_DIR}
runs=${3:-2}
mkdir -p "$out"
common=(train --table "$table" --first-bucket 4K --bucket-cap 64K -b 64 --progress off
    --check-table)
# Candidates per bucket (choice, native, null, up to two contenders) x 10 rounds: at most 50.
check=50
for i in $(seq "$runs"); do
    for order in first later; do
        if [ "$order" = first ]; then
            place=(--warmup-steps 2 --steps $((2 + 2 * check)))
        else
            place=(--warmup-steps $((2 + check)) --steps $((2 + 2 * check)))
        fi
        echo "# run $i, check $order, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
        mpiexec -n 2 osu-dl-bench "${common[@]}" "${place[@]}" \
            --json "$out/check-$i-$order.json" > "$out/check-$i-$order.txt"
    done
done
python3 - "$out" <<'PY'
import glob, json, statistics, sys
shares = []
for path in sorted(glob.glob(f"{sys.argv[1]}/check-*.json")):
    check = json.load(open(path))["check"]
    print(f"## {path}")
    for v in check["sizes"]:
        verdict = "holds" if v["holds"] else f"does not hold (rule: {v['rule_choice']})"
        print(f"   {v['nbytes']:>9} B {v['table_choice']}: {verdict}; null/native "
              f"{v['null_ratio']:.3f} [{v['null_low']:.3f}-{v['null_high']:.3f}]")
    share = check["cost"]["share_of_1000_steps"]
    shares.append(share)
    print(f"   cost: {share:+.2%} of 1,000 plain steps")
print(f"# cost over {len(shares)} runs: mean {statistics.mean(shares):+.2%}, "
      f"range {min(shares):+.2%} .. {max(shares):+.2%}")
PY
