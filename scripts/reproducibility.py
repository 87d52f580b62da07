"""How reproducible a machine's sweeps are: the noise floor under tuning tables and models.

    python scripts/reproducibility.py RUN_A RUN_B [--nprocs 2,4] [--out FILE]

Two sweeps of the same algorithms on the same machine, minutes apart, should agree. This
compares every (collective, p, size, algorithm) point both measured, by median:

- the shift of one algorithm between the runs, as measured, and relative to its point's
  median shift (the machine's speed state moves every algorithm at once; what is left
  reorders algorithms). A share of relative moves above 5% says how often two algorithms
  within 5% of each other can trade places from one run to the next: the floor under a
  tuning table's "within 5% of the best in a separate run";
- the spread within RUN_B: the median over its points of (q3 - q1) / median over rounds;
- RUN_A's medians taken as the prediction of RUN_B's, scored with the performance model's
  metric (accuracy = 1 - |pred - meas| / meas, Kahira et al.): the accuracy a perfect,
  state-frozen model would reach against RUN_B.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

KEY = ["collective", "nprocs", "size_bytes", "algorithm"]
LARGE = 64 * 1024  # the model's accuracy target is for messages of 64 KiB and above


def _medians(run_dir: str) -> pd.DataFrame:
    path = Path(run_dir) / "results.csv"
    if not path.exists():
        sys.exit(f"{run_dir}: no results.csv (expected a sweep's run directory)")
    frame = pd.read_csv(path)
    frame = frame[frame["validation"].fillna("pass") != "fail"]
    frame = frame.assign(spread=(frame["q3_us"] - frame["q1_us"]) / frame["median_us"])
    return frame.drop_duplicates(KEY, keep="last")[[*KEY, "median_us", "spread"]]


def compare(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Points both runs measured, with the shift b/a, the shift relative to the point's
    median shift, and a's median scored as the prediction of b's."""
    both = a.merge(b, on=KEY, suffixes=("_a", "_b")).rename(columns={"spread_b": "spread"})
    both["shift"] = both["median_us_b"] / both["median_us_a"]
    point_shift = both.groupby(KEY[:3])["shift"].transform("median")
    both["relative"] = both["shift"] / point_shift
    both["accuracy"] = 1 - (both["median_us_a"] - both["median_us_b"]).abs() / both["median_us_b"]
    return both


def _moved(values: pd.Series) -> float:
    return float((np.abs(np.log(values)) > np.log(1.05)).mean() * 100)


def report(both: pd.DataFrame, run_a: str, run_b: str) -> str:
    """One line per process count, then all together."""
    lines = [
        f"# {run_a} against {run_b}: {len(both)} points measured by both",
        f"{'p':>4}{'points':>8}{'median shift':>14}{'moved >5%':>11}"
        f"{'relative >5%':>14}{'IQR in B':>10}{'accuracy >=64K':>16}{'<64K':>8}",
    ]
    groups = [(str(p), g) for p, g in both.groupby("nprocs")] + [("all", both)]
    for name, group in groups:
        large = group[group["size_bytes"] >= LARGE]
        small = group[group["size_bytes"] < LARGE]
        lines.append(
            f"{name:>4}{len(group):>8}"
            f"{np.median(np.abs(np.log(group['shift']))) * 100:>13.1f}%"
            f"{_moved(group['shift']):>10.0f}%{_moved(group['relative']):>13.0f}%"
            f"{np.median(group['spread']) * 100:>9.1f}%"
            f"{large['accuracy'].mean() * 100:>15.1f}%{small['accuracy'].mean() * 100:>7.1f}%"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument("--nprocs", default=None, help="only these process counts: 2,4")
    parser.add_argument("--out", default=None, help="also write the report to this file")
    args = parser.parse_args()
    both = compare(_medians(args.run_a), _medians(args.run_b))
    if args.nprocs:
        wanted = {int(p) for p in args.nprocs.split(",")}
        both = both[both["nprocs"].isin(wanted)]
    if both.empty:
        sys.exit("the two runs share no measured point")
    text = report(both, args.run_a, args.run_b)
    print(text)
    if args.out:
        Path(args.out).write_text(f"# command: {' '.join(sys.argv)}\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
