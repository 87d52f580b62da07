#!/usr/bin/env python3
"""Per message size, each algorithm family's best variant against native and against a
second family, paired and with 95% intervals, as `tune` decides (selection.tune).

    python scripts/family_ratios.py RUN_DIR tree ring [--collective allreduce]

A family may be several, comma-separated (`hierarchical ring,rabenseifner,tree`): the best
variant of any of them.

Prints one line per (p, size): native's median, then FAMILY's best variant (the lowest
ratio to native among its variants) with its ratio and interval, OTHER's likewise, and
FAMILY / OTHER paired as the tuner pairs (exp median log-ratio, cluster bootstrap).
"""

from __future__ import annotations

import argparse
import sys

from collectives.units import format_size
from osu_dl_bench.selection.tune import PointDecision, run_decisions


def _best(point: PointDecision, family: str) -> str | None:
    """The variant of ``family`` (or of any of its comma-separated families) with the
    lowest ratio here, if any was measured."""
    families = set(family.split(","))
    labels = [c for c in point.candidates if c.split(":")[0] in families]
    return min(labels, key=lambda c: point.candidates[c].ratio.ratio, default=None)


def _text(ratio) -> str:
    if ratio is None:
        return "-"
    return f"{ratio.ratio:.2f} [{ratio.low:.2f}-{ratio.high:.2f}]"


def main(argv: list[str]) -> int:
    """Print the table; exit 2 on a run without the families asked for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("family")
    parser.add_argument("other")
    parser.add_argument("--collective", default="allreduce")
    args = parser.parse_args(argv)
    decisions, _ = run_decisions(args.run_dir)
    points = [d for d in decisions.values() if d.key.collective == args.collective]
    print(
        f"# {args.collective}: {args.family} and {args.other} (best variant per size) vs "
        f"native, and {args.family} / {args.other}; ratio [95% CI], < 1 is faster"
    )
    print(
        f"{'p':>3} {'size':>7} {'native us':>10}  {args.family + ' best':<22} "
        f"{'vs native':<18} {args.other + ' best':<22} {'vs native':<18} "
        f"{args.family + '/' + args.other}"
    )
    found = 0
    for point in points:
        mine, theirs = _best(point, args.family), _best(point, args.other)
        if mine is None or theirs is None:
            continue
        found += 1
        native = point.native
        native_us = f"{native.series.quartiles_us()[1]:.1f}" if native else "-"
        print(
            f"{point.key.nprocs:>3} {format_size(point.size):>7} {native_us:>10}  "
            f"{mine:<22} {_text(point.candidates[mine].ratio):<18} "
            f"{theirs:<22} {_text(point.candidates[theirs].ratio):<18} "
            f"{_text(point.ratio_between(mine, theirs))}"
        )
    if not found:
        print(f"no point measured both {args.family} and {args.other}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
