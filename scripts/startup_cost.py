#!/usr/bin/env python3
"""What a command costs before its work starts, in two source trees: wall and CPU time of
the same command run from each, alternated, with the ratio's 95% interval.

    python scripts/startup_cost.py OLD_TREE NEW_TREE [--runs 20] -- ARGS...

A tree is a checkout (or `git archive` of one) holding osu_dl_bench and collectives; the
command is `python -m osu_dl_bench ARGS` with that tree first on PYTHONPATH, under this
interpreter, in the tree's folder. Runs alternate old/new (the first of each pair drawn
at random), so a drift of the machine falls on both alike; the ratio new/old is the exp
of the mean of the pairs' log ratios, its interval Student's t over the pairs.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from osu_dl_bench.stats.intervals import t_quantile


def one_run(tree: Path, args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the child: user + system) of one run from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "osu_dl_bench", *args],
        env=env,
        cwd=tree,  # python -m puts the working directory first on sys.path
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        timeout=600,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def ratio_text(old: list[float], new: list[float]) -> str:
    """'0.21x (95% CI 0.20-0.22)': new over old, paired run by run."""
    logs = [math.log(n / o) for o, n in zip(old, new, strict=True)]
    mean = statistics.fmean(logs)
    half = t_quantile(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return f"{math.exp(mean):.2f}x (95% CI {math.exp(mean - half):.2f}-{math.exp(mean + half):.2f})"


def main() -> int:
    """Measure and print one line per measure (wall, CPU)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--runs", type=int, default=20, help="pairs of runs (>= 2)")
    argv = sys.argv[1:]
    if "--" not in argv:
        parser.error("give the command's ARGS after --")
    cut = argv.index("--")
    opts, args = parser.parse_args(argv[:cut]), argv[cut + 1 :]
    if opts.runs < 2 or not args:
        parser.error("give --runs >= 2 and the command's ARGS after --")
    found: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
    for _ in range(opts.runs):
        pair = [("old", opts.old), ("new", opts.new)]
        random.shuffle(pair)
        for name, tree in pair:
            found[name].append(one_run(tree, args))
    print(f"# python -m osu_dl_bench {' '.join(args)}: {opts.runs} alternated pairs")
    for index, what in enumerate(("wall", "CPU")):
        old = [r[index] for r in found["old"]]
        new = [r[index] for r in found["new"]]
        print(
            f"{what}: old median {statistics.median(old):.3f} s, new median "
            f"{statistics.median(new):.3f} s, new/old {ratio_text(old, new)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
