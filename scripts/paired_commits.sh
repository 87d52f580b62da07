#!/usr/bin/env bash
# Small-message latency of shm and cma under two commits, paired round by round (this
# kind of machine changes speed between launches: compare only within a round).
#   bash scripts/paired_commits.sh OLD_REV NEW_REV [ROUNDS]
# Prints "round rev collective latency_us" lines, then per collective the median of each
# and the median [min..max] of the per-round differences and ratios (new / old).
set -euo pipefail
old_rev=${1:?usage: paired_commits.sh OLD_REV NEW_REV [ROUNDS]}
new_rev=${2:?usage: paired_commits.sh OLD_REV NEW_REV [ROUNDS]}
rounds=${3:-6}
repo=$(cd "$(dirname "$0")/.." && pwd)
py="$repo/.venv/bin/python"
mpiexec="$repo/.venv/bin/mpiexec"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for rev in "$old_rev" "$new_rev"; do
    mkdir -p "$work/$rev"
    git -C "$repo" archive "$rev" osu_dl_bench | tar -x -C "$work/$rev"
done
for round in $(seq "$rounds"); do
    for rev in "$old_rev" "$new_rev"; do
        for case in "bcast -a shm" "allreduce -a shm" "allreduce -a cma"; do
            # The tree's own package must run, not the installed one: checked, not assumed.
            latency=$(cd "$work/$rev" && "$mpiexec" -n 2 "$py" -c \
                "import osu_dl_bench, sys; assert osu_dl_bench.__file__.startswith('$work/$rev')
from osu_dl_bench.cli import main; sys.exit(main())" \
                bench $case -m 8:8 -i 3000 -x 300 | awk '/^8 /{print $2}')
            echo "$round $rev ${case// /_} $latency"
        done
    done
done | tee "$work/rounds.txt"
"$py" - "$work/rounds.txt" "$old_rev" "$new_rev" <<'PY'
import collections, statistics, sys
path, old, new = sys.argv[1:]
by = collections.defaultdict(dict)
for line in open(path):
    rnd, rev, case, value = line.split()
    by[(case, rnd)][rev] = float(value)
cases = collections.defaultdict(list)
for (case, _), pair in by.items():
    cases[case].append((pair[old], pair[new]))
for case, pairs in cases.items():
    diffs = sorted(n - o for o, n in pairs)
    ratios = sorted(n / o for o, n in pairs)
    print(
        f"{case}: {old} {statistics.median(o for o, _ in pairs):.2f} us, "
        f"{new} {statistics.median(n for _, n in pairs):.2f} us; new - old "
        f"{statistics.median(diffs):+.2f} [{diffs[0]:+.2f}..{diffs[-1]:+.2f}] us, "
        f"new / old {statistics.median(ratios):.2f} [{ratios[0]:.2f}..{ratios[-1]:.2f}]"
    )
PY
