"""``osu-dl-bench compare RUN_A RUN_B [--table T]``: how far two sweeps of the same code on
the same machine agree, and (with --table) how a tuning table's choices fare on a run it
was not built from.

The run comparison takes every (buffer kind, dtype, op, collective, p, size, algorithm)
point both runs measured, by median:

- the shift of one algorithm between the runs, as measured, and relative to its point's
  median shift (the machine's speed state moves every algorithm at once; what is left
  reorders algorithms). A share of relative moves above 5% says how often two algorithms
  within 5% of each other can trade places from one run to the next: the floor under a
  tuning table's "within 5% of the best in a separate run";
- the spread within RUN_B: the median over its points of (q3 - q1) / median over rounds;
- RUN_A's medians taken as the prediction of RUN_B's, scored with the performance model's
  metric (accuracy = 1 - |pred - meas| / meas, Kahira et al.): the accuracy a perfect,
  state-frozen model would reach against RUN_B.

The table check looks up, for every (collective, p) of RUN_B and every measured size, the
runtime selector's choice from the table among RUN_B's interleaved measurements and
compares it, by median over rounds, with the best candidate measured there and with native
(twins, variants whose chunk or segment size has no effect at a size, count as one: older
sweeps timed them apart, and the best of equal codes is only the luckiest draw). The
targets: chosen <= 1.05 x best everywhere (median of the ratios <= 1.03) and chosen
<= 1.05 x native everywhere.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
from pathlib import Path

import numpy as np
import pandas as pd

from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import RunStore

# A point: one call measured in both runs. Its algorithms share the point's speed state.
POINT = ["device", "dtype", "op", "collective", "nprocs", "size_bytes"]
KEY = [*POINT, "algorithm"]
LARGE = 64 * 1024  # the model's accuracy target is for messages of 64 KiB and above
MOVED = 1.05  # a shift beyond 5% either way counts as a move
BEST_MAX, BEST_MEDIAN, NATIVE_MAX = 1.05, 1.03, 1.05  # the table's targets


def run_compare(args: argparse.Namespace) -> int:
    """Print (and with --out write) the run comparison, then the table check."""
    wanted = _process_counts(args.nprocs)
    a, b = measured_points(args.run_a), measured_points(args.run_b)
    both = paired_points(a, b)
    if wanted:
        both = both[both["nprocs"].isin(wanted)]
    if both.empty:
        raise UsageError(f"{args.run_a} and {args.run_b} share no measured point")
    reports = [shift_report(both, args.run_a, args.run_b)]
    if args.table:
        reports.append(table_report(args.table, args.run_b, wanted))
    text = "\n\n".join(reports)
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(f"# command: {shlex.join(command_line(args))}\n{text}\n")
    return 0


def command_line(args: argparse.Namespace) -> list[str]:
    """The command that gives this report, as the --out file records it."""
    argv = ["osu-dl-bench", "compare", args.run_a, args.run_b]
    for flag, value in (("--table", args.table), ("--nprocs", args.nprocs)):
        argv += [flag, value] if value else []
    return argv


def _process_counts(text: str | None) -> tuple[int, ...]:
    from osu_dl_bench.jobs.options import parse_process_counts

    return parse_process_counts(text) if text else ()


def _results(run_dir: str) -> pd.DataFrame:
    """A run's measured rows (UsageError if it is no sweep's run directory)."""
    store = RunStore(run_dir)
    if not store.results_path.is_file():
        raise UsageError(f"{run_dir}: no results.csv (expected a sweep's run directory)")
    frame = store.load()
    return frame[frame["validation"].fillna("pass") != "fail"]


def measured_points(run_dir: str) -> pd.DataFrame:
    """One row per point and algorithm (the last measurement, as --resume keeps), with its
    median and its relative spread (q3 - q1) / median."""
    frame = _results(run_dir)
    frame = frame.assign(
        op=frame["op"].astype(object).fillna(""),  # bcast has no op: '' matches ''
        spread=(frame["q3_us"] - frame["q1_us"]) / frame["median_us"],
    )
    return frame.drop_duplicates(KEY, keep="last")[[*KEY, "median_us", "spread"]]


def paired_points(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Points both runs measured, with the shift b/a, the shift relative to the point's
    median shift, and a's median scored as the prediction of b's."""
    both = a.merge(b, on=KEY, suffixes=("_a", "_b")).rename(columns={"spread_b": "spread"})
    both["shift"] = both["median_us_b"] / both["median_us_a"]
    point_shift = both.groupby(POINT)["shift"].transform("median")
    both["relative"] = both["shift"] / point_shift
    both["accuracy"] = 1 - (both["median_us_a"] - both["median_us_b"]).abs() / both["median_us_b"]
    return both


def _moved(values: pd.Series) -> float:
    """Percentage of ratios beyond MOVED either way."""
    return float((np.abs(np.log(values)) > np.log(MOVED)).mean() * 100)


def shift_report(both: pd.DataFrame, run_a: str, run_b: str) -> str:
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


# --- a table on another run -------------------------------------------------------------


def table_report(table: str, run_dir: str, wanted: tuple[int, ...] = ()) -> str:
    """The table's choice at every point of ``run_dir`` against the best and native there,
    one line per size, then a verdict per (collective, p)."""
    from osu_dl_bench.selection.selector import Selector

    selector = Selector.from_file(table)
    frame = _results(run_dir)
    if wanted:
        frame = frame[frame["nprocs"].isin(wanted)]
    lines = [
        f"# table {table} checked against the separate run {run_dir}",
        f"{'collective':<10}{'p':>3}{'size':>10}  {'chosen':<34}{'chosen/best':>12}"
        f"{'chosen/native':>14}  best",
    ]
    verdicts = []
    for (device, collective, nprocs), group in frame.groupby(["device", "collective", "nprocs"]):
        to_best, to_native = [], []
        for size, at_size in group.groupby("size_bytes"):
            line, ratios = _point_regret(selector, device, collective, int(nprocs), at_size)
            lines.append(f"{collective:<10}{nprocs:>3}{size:>10}  {line}")
            if ratios:
                to_best.append(ratios[0])
                to_native.append(ratios[1])
        verdicts.append(target_verdict(f"{collective} p={nprocs} ({device})", to_best, to_native))
    return "\n".join(lines + verdicts)


def _point_regret(selector, device: str, collective: str, nprocs: int, at_size: pd.DataFrame):
    """(the rest of the point's line, (chosen/best, chosen/native) or None if the choice
    was not measured there)."""
    from osu_dl_bench.selection.selector import Query, default_context
    from osu_dl_bench.selection.tune import point_representatives, without_twins

    at_size = without_twins(collective, at_size.drop_duplicates("algorithm", keep="last"))
    medians = dict(zip(at_size["algorithm"], at_size["median_us"], strict=True))
    first = at_size.iloc[0]
    query = Query(
        collective,
        nprocs,
        int(first["size_bytes"]),
        device,
        int(first["nodes"]),
        int(first["ppn"]),
    )
    chosen = selector.decide(query, default_context(query)).label
    # The measured twin of the choice (the same code under another chunk size).
    kept = point_representatives(collective, at_size, chosen)
    chosen = next((a for a in medians if kept[a] == kept[chosen]), chosen)
    if chosen not in medians:
        return f"{chosen:<34} not measured", None
    if "native" not in medians:
        return f"{chosen:<34} native not measured", None
    best = min(medians, key=medians.get)
    to_best, to_native = medians[chosen] / medians[best], medians[chosen] / medians["native"]
    return f"{chosen:<34}{to_best:>12.3f}{to_native:>14.3f}  {best}", (to_best, to_native)


def target_verdict(what: str, to_best: list[float], to_native: list[float]) -> str:
    """'# WHAT: chosen/best median .. max ..; chosen/native ... -> meets|misses the targets'."""
    if not to_best:
        return f"# {what}: the table's choices were not measured in this run"
    ok = (
        max(to_best) <= BEST_MAX
        and statistics.median(to_best) <= BEST_MEDIAN
        and max(to_native) <= NATIVE_MAX
    )
    return (
        f"# {what}: "
        f"chosen/best median {statistics.median(to_best):.3f} "
        f"max {max(to_best):.3f}; chosen/native median {statistics.median(to_native):.3f} "
        f"max {max(to_native):.3f} -> {'meets' if ok else 'misses'} the targets "
        f"(best <= {BEST_MAX} everywhere, median <= {BEST_MEDIAN}, native <= {NATIVE_MAX})"
    )
