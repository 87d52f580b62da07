"""One table from bench's -o records of a GPU run: NCCL's algorithm bandwidth on device
buffers beside the device's memcpy and copy-kernel bounds, and MPI's staged algorithms
beside them with the staging cost.

    python scripts/gpu_bandwidth.py RECORDS.json [RECORDS.json ...]

Reads every record (bench -d cuda ... --bounds -o F.json) and prints, per message size:
- per collective and process count, NCCL's algbw (GB/s), and the best MPI algorithm's
  (its name), both as bench computed them (message bytes over OSU's average latency);
- the ``memcpy`` bound at NCCL's process count: the device's memcpy of the message
  (cudaMemcpyAsync device to device; ``copy`` in records written before it was renamed),
  which at p = 1 is the very call NCCL makes (ncclLaunchOneRank), and the ``copy-kernel``
  bound, the same copy by a kernel on the SMs (measurement.bounds);
- the ``staging`` bound: the microseconds a staged MPI call spends copying through
  pinned host memory, and their share of the best staged algorithm's time.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import numpy as np
import pandas as pd

from osu_dl_bench.jsonfile import read_regular_file
from osu_dl_bench.measurement.bounds import BACKEND, COPY, COPY_KERNEL, MEMCPY, STAGING
from osu_dl_bench.measurement.records import read_records
from osu_dl_bench.selection.paired import Launch, Series, paired_ratio

KEYS = ["collective", "size_bytes"]
# What identifies a row within one launch: one dtype, one in-place setting per bench run.
ROW = ["collective", "size_bytes", "algorithm"]


def read(path: str) -> pd.DataFrame:
    """The records of one bench -o file; ValueError naming it where it is not one."""
    return read_with_digest(path)[0]


def read_with_digest(path: str) -> tuple[pd.DataFrame, str]:
    """The records of one bench -o file and the sha256 of its bytes (a launch given twice
    has the same); ValueError naming the file where it is not one."""
    try:
        # A directory or a FIFO: one message, never pandas' error or a read that blocks.
        data = read_regular_file(path, limit=None)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    try:
        return read_records(path), hashlib.sha256(data).hexdigest()
    except (ImportError, OSError, ValueError) as error:  # ImportError: parquet, no pyarrow
        raise ValueError(f"{path}: not bench -o records: {error}") from None


def load(paths: list[str]) -> pd.DataFrame:
    """Every record of ``paths``, one row each."""
    return pd.concat([read(path) for path in paths], ignore_index=True)


def _best(rows: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Per (collective, size): the fastest of ``rows``, its name, GB/s, us and p."""
    if rows.empty:
        return pd.DataFrame()
    best = rows.loc[rows.groupby(KEYS)["avg_us"].idxmin()].set_index(KEYS)
    return best[["algorithm", "algbw_gbs", "avg_us", "nprocs"]].add_prefix(prefix)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (collective, size): NCCL at its process count with the memcpy and copy-kernel
    bounds timed beside it, the best staged MPI algorithm at its own with the staging
    copies timed beside it."""
    bounds = frame[frame.backend == BACKEND]
    nccl_p = frame.loc[frame.backend == "nccl", "nprocs"].min()
    mpi_p = frame.loc[frame.backend == "mpi", "nprocs"].max()
    at_nccl_p = bounds[bounds.nprocs == nccl_p]
    # Records before the device's memcpy bound was named so call it copy.
    memcpy = at_nccl_p[at_nccl_p.algorithm.isin([MEMCPY, COPY])]
    kernel = at_nccl_p[at_nccl_p.algorithm == COPY_KERNEL]
    staging = bounds[(bounds.algorithm == STAGING) & (bounds.nprocs == mpi_p)]
    joined = pd.concat(
        [
            _best(frame[frame.backend == "nccl"], "nccl_"),
            _best(frame[frame.backend == "mpi"], "mpi_"),
            _best(memcpy, "memcpy_"),
            _best(kernel, "kernel_"),
            _best(staging, "staging_"),
        ],
        axis=1,
    )
    if "staging_avg_us" in joined and "mpi_avg_us" in joined:
        joined["staging_share"] = joined["staging_avg_us"] / joined["mpi_avg_us"]
    return joined.sort_index()


def _cell(row: pd.Series, column: str, spec: str) -> str:
    """``row[column]`` formatted, or '-' where it is missing."""
    value = row.get(column)
    return "-" if value is None or pd.isna(value) else format(value, spec)


def _processes(joined: pd.DataFrame, column: str) -> str:
    """The process counts in ``column``, as '1' or '2/4' ('-' for none)."""
    values = joined[column].dropna().unique() if column in joined else []
    return "/".join(str(int(v)) for v in sorted(values)) or "-"


def lines(joined: pd.DataFrame) -> list[str]:
    """The table as text, a block per collective."""
    out = []
    for collective, block in joined.groupby(level=0):
        nccl_p, mpi_p = _processes(block, "nccl_nprocs"), _processes(block, "mpi_nprocs")
        out += [
            "",
            f"# {collective}: algbw in GB/s (message bytes / OSU's average latency)",
            f"# nccl at p = {nccl_p}, beside memcpy (cudaMemcpyAsync device to device: at p = 1 "
            "NCCL's own call, so a difference there is noise) and kernel (a copy kernel on the "
            "SMs), timed in the same rounds",
            f"# best staged MPI algorithm at p = {mpi_p}, beside the host copies a staged call "
            "pays in the same run (us, and their share of that algorithm's time)",
        ]
        if collective == "bcast" and nccl_p == "1":
            # At p = 1 the root's buffer already is the result: nothing moves.
            out.append("# nccl at p = 1: a bcast moves no bytes; its algbw is not a bandwidth")
        out += [
            f"{'# size':<12}{'nccl':>10}{'memcpy':>10}{'kernel':>10}{'best mpi (staged)':>34}"
            f"{'staging us':>12}{'share':>8}",
        ]
        for (_, size), row in block.iterrows():
            mpi = "-"
            if not pd.isna(row.get("mpi_algbw_gbs", float("nan"))):
                mpi = f"{row['mpi_algbw_gbs']:.2f} ({row['mpi_algorithm']})"
            out.append(
                f"{size:<12}{_cell(row, 'nccl_algbw_gbs', '.2f'):>10}"
                f"{_cell(row, 'memcpy_algbw_gbs', '.2f'):>10}"
                f"{_cell(row, 'kernel_algbw_gbs', '.2f'):>10}{mpi:>34}"
                f"{_cell(row, 'staging_avg_us', '.1f'):>12}"
                f"{_cell(row, 'staging_share', '.0%'):>8}"
            )
    return out


def _not_one_table(frame: pd.DataFrame) -> str | None:
    """Why the records do not make one table (None if they do)."""
    if frame.empty or not set(KEYS + ["backend", "algorithm", "nprocs"]) <= set(frame):
        return "no bench records (bench -o F.json)"
    for column in ("dtype", "device"):
        if column in frame and frame[column].nunique() > 1:
            values = ", ".join(sorted(map(str, frame[column].unique())))
            return f"records of several {column}s ({values}): give one table's files"
    return None


def iteration_times(value: object) -> np.ndarray:
    """A record's per-iteration times (µs): a list in JSON and Parquet, bench's
    space-separated text in CSV (measurement.records), nothing where the cell is empty."""
    if isinstance(value, str):
        value = value.split()
    elif value is None or (np.ndim(value) == 0 and pd.isna(value)):
        value = []
    times = np.asarray(value, dtype=float)
    if times.ndim != 1:
        raise ValueError(f"expected a list of times, got {str(value)[:40]}")
    return times


def _point(row) -> str:
    return f"{row.collective} {row.algorithm} at {int(row.size_bytes)} B"


def _launch_problem(records: pd.DataFrame, labels: tuple[str, str]) -> str | None:
    """Why ``records`` are not one launch of bench with ``labels``' per-iteration times:
    positive and finite, timed in the same iterations at each size."""
    if records.empty or not set(ROW + ["nprocs"]) <= set(records):
        return "no bench records (bench -o F.json)"
    if "iter_max_us" not in records:
        return "no per-iteration times (iter_max_us): give bench -o files"
    if records.nprocs.nunique() > 1:
        counts = ", ".join(str(int(p)) for p in sorted(records.nprocs.unique()))
        return f"records at several process counts ({counts}): one launch per file"
    twice = records[records.duplicated(ROW)]
    if not twice.empty:
        return f"{_point(next(twice.itertuples()))} recorded twice: one launch per file"
    counts = {}
    for row in records[records.algorithm.isin(labels)].itertuples():
        try:
            times = iteration_times(row.iter_max_us)
        except (TypeError, ValueError) as error:
            return f"{_point(row)}: iter_max_us: {error}"
        bad = times[~(np.isfinite(times) & (times > 0))]
        if not times.size:
            return f"{_point(row)} has no per-iteration times"
        if bad.size:
            return f"{_point(row)} holds {bad[0]} us, expected positive finite times"
        counts.setdefault((row.collective, int(row.size_bytes)), {})[row.algorithm] = times.size
    for (collective, size), found in counts.items():
        if len(set(found.values())) > 1:
            (a, a_count), (b, b_count) = found.items()
            return (
                f"{collective} at {size} B: {a} has {a_count} iterations, {b} {b_count}: "
                "they were not timed in the same iterations"
            )
    return None


def _iterations(records: pd.DataFrame, labels: tuple[str, str]) -> dict[tuple, int]:
    """(collective, size, label) -> its iteration count, for ``labels``' rows."""
    rows = records[records.algorithm.isin(labels)]
    return {
        (r.collective, int(r.size_bytes), r.algorithm): iteration_times(r.iter_max_us).size
        for r in rows.itertuples()
    }


def _unlike_problem(
    records: pd.DataFrame, first: str, theirs: pd.DataFrame, labels: tuple[str, str]
) -> str | None:
    """Why launch ``records`` is not a launch of the same command as ``theirs`` (the
    records of file ``first``): another process count, other points, other iterations."""
    mine, p = _iterations(records, labels), int(records.nprocs.iloc[0])
    other, their_p = _iterations(theirs, labels), int(theirs.nprocs.iloc[0])
    missing, extra = sorted(set(other) - set(mine)), sorted(set(mine) - set(other))
    longer = [key for key in sorted(mine) if key in other and mine[key] != other[key]]
    if p != their_p:
        return f"records at p = {p}, {first}'s at p = {their_p}"
    if missing:
        return f"does not time {_named(missing[0])}, which {first} does"
    if extra:
        return f"times {_named(extra[0])}, which {first} does not"
    if longer:
        key = longer[0]
        return f"{_named(key)} has {mine[key]} iterations, {first}'s {other[key]}"
    return None


def _named(key: tuple) -> str:
    collective, size, label = key
    return f"{collective} {label} at {size} B"


def load_launches(paths: list[str], labels: tuple[str, str]) -> pd.DataFrame:
    """Every record of ``paths``, each file numbered as one launch (from 1); ValueError
    naming the file unless each is a launch of the same bench command, given once, with
    ``labels``' per-iteration times: a repeated launch would narrow the interval, and
    launches of different commands do not pair."""
    parts, seen = [], {}
    for number, path in enumerate(paths, 1):
        records, digest = read_with_digest(path)
        problem = _launch_problem(records, labels)
        if problem is None and digest in seen:
            problem = f"the same records as {seen[digest]}: give each launch once"
        if problem is None and parts:
            problem = _unlike_problem(records, paths[0], parts[0], labels)
        if problem:
            raise ValueError(f"{path}: {problem}")
        seen[digest] = path
        parts.append(records.assign(launch=number))
    return pd.concat(parts, ignore_index=True)


def _series(rows: pd.DataFrame) -> Series:
    """One label's launches at one point: each launch's per-iteration times as its rounds
    (timed in the same interleaved iterations as every other label of that launch)."""
    launches = []
    for row in rows.itertuples():
        rounds = iteration_times(row.iter_max_us)
        launches.append(
            Launch(int(row.launch), rounds, float(np.median(rounds)), 0.0, 0.0, rounds.size)
        )
    return Series("mpi", tuple(sorted(launches, key=lambda x: x.number)))


def paired_lines(frame: pd.DataFrame, first: str, second: str) -> list[str]:
    """Per (collective, size): time(first) / time(second) with its 95% interval, paired
    iteration by iteration within each launch and over launches (selection.paired), and
    whether the interval holds 1 (the two cannot be told apart)."""
    width = max(14, len(first) + 5, len(second) + 5)
    out = [
        "",
        f"# {first} / {second}: paired ratio of times, 95% interval over "
        f"{frame.launch.nunique()} launch(es) at p = {int(frame.nprocs.iloc[0])} "
        "(selection.paired.paired_ratio)",
        f"{'# coll':<11}{'size':>12}{first + ' us':>{width}}{second + ' us':>{width}}"
        f"{'ratio [95% interval]':>26}  holds 1",
    ]
    for (collective, size), point in frame.groupby(KEYS):
        mine, theirs = point[point.algorithm == first], point[point.algorithm == second]
        if mine.empty or theirs.empty or "iter_max_us" not in point:
            continue
        timed, against = _series(mine), _series(theirs)
        ratio = paired_ratio(timed, against, collective, size, first, second)
        if ratio is None:
            continue
        cell = f"{ratio.ratio:.3f} [{ratio.low:.3f}-{ratio.high:.3f}]"
        holds = "yes" if ratio.low <= 1 <= ratio.high else "no"
        out.append(
            f"{collective:<11}{size:>12}{timed.latency_us():>{width}.2f}"
            f"{against.latency_us():>{width}.2f}{cell:>26}  {holds}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the table of the records named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", help="bench -o files (.json, .csv, .parquet)")
    parser.add_argument(
        "--paired",
        nargs=2,
        metavar=("A", "B"),
        help="instead of the table: time(A) / time(B) per size with its interval, each "
        "file one launch of the same command (e.g. --paired nccl memcpy)",
    )
    args = parser.parse_args(argv)
    if args.paired:
        try:
            frame = load_launches(args.records, tuple(args.paired))
        except ValueError as error:
            print(f"gpu_bandwidth: --paired: {error}", file=sys.stderr)
            return 2
        found = paired_lines(frame, *args.paired)
        if len(found) <= 3:
            print(f"gpu_bandwidth: no size holds both {' and '.join(args.paired)}", file=sys.stderr)
            return 2
        print("\n".join(found))
        return 0
    try:
        frame = load(args.records)
    except (OSError, ValueError) as error:  # missing, unreadable, not bench's records
        print(f"gpu_bandwidth: cannot read the records: {error}", file=sys.stderr)
        return 2
    problem = _not_one_table(frame)
    if problem:
        print(f"gpu_bandwidth: {', '.join(args.records)}: {problem}", file=sys.stderr)
        return 2
    print("\n".join(lines(table(frame))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
