"""A sweep's run directory: ``metadata.json`` plus ``results.csv`` appended point by point.

Layout (schema version 1)::

    RUN_DIR/metadata.json   what ran where: MPI library, hosts, nodes, ppn, buffer kind,
                            package version, command line, date (one entry per launched job
                            under "jobs", keyed by process count)
    RUN_DIR/results.csv     one row per measured (nprocs, collective, algorithm, size),
                            columns SWEEP_FIELDS, appended and flushed as soon as measured
    RUN_DIR/results.parquet written at the end when pyarrow is present
    RUN_DIR/sweep.lock      held (flock) by the command writing into the directory (a sweep,
                            train-bench, a script's experiment); it holds that command's pid,
                            host and command line

A killed run loses at most the point in flight; ``finished_points`` lets --resume skip
what is already there. A full disk can cut the last row short: reading drops it (and any
row of the wrong shape or without statistics) with a warning, so --resume measures it
again, and appending first cuts the partial row off.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import io
import json
import math
import os
import re
import socket
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives.shape import JobShape
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import describe, is_count, is_kind, kind_text, load_json, type_name
from osu_dl_bench.paths import FOCUS, LOCK, METADATA, RESULTS, RESULTS_PARQUET, write_text_atomic
from osu_dl_bench.runtime.metadata import command_line

if TYPE_CHECKING:  # pandas at first use: every rank of a sweep job imports this module
    import pandas as pd

SCHEMA_VERSION = 1
# RESULTS, METADATA, LOCK and FOCUS (an adaptive sweep's extra launches: which candidates
# each measures, and why) are named in paths, which keeps other outputs off them.
# A focus entry: one candidate at one point of a launch.
FOCUS_KEY = ("nprocs", "collective", "size_bytes", "algorithm")
# Lines named in the warning about dropped rows (the count covers them all).
NAMED_LINES = 5


# train-bench's rows: one training step of one configuration per round, stored as a
# sweep's point whose "collective" is this word, so merge, resume and the lock treat a
# training run as any other.
TRAINING_STEP = "train_step"


def is_training_run(frame: pd.DataFrame) -> bool:
    """True when every row is a training step (a train-bench run directory)."""
    return not frame.empty and bool((frame["collective"] == TRAINING_STEP).all())


def collective_rows(frame: pd.DataFrame, source: str | os.PathLike) -> pd.DataFrame:
    """``frame`` without training steps, which no collective's algorithm can explain; a
    run of nothing else is refused with one message naming what reads it."""
    if is_training_run(frame):
        raise UsageError(
            f"{source}: holds train-bench's training steps, not collectives: tune, plot "
            "and the model read sweeps; 'osu-dl-bench compare RUN_A RUN_B' and merge "
            "read training runs too"
        )
    return frame[frame["collective"] != TRAINING_STEP]


def launch_entries(job: dict[str, Any]) -> list[dict[str, Any]]:
    """A process count's launch entries in metadata.json's "jobs" (a run written before
    launches were kept: its one job)."""
    return list((job.get("launches") or {}).values()) or [job]


# Isolation groups and machine states, as stored.
LEGACY_GROUP = "shared"  # rows from before isolation: every backend in one process
NORMAL, OUTLYING, REMEASURED = "normal", "outlying", "remeasured"


@dataclass(frozen=True)
class SweepPoint:
    """One candidate's timing at one (nprocs, collective, size), from interleaved rounds.

    Each round runs every candidate ``iterations`` times; a round's time is the mean over
    those iterations of the per-iteration maximum across ranks. ``median_us`` and the
    quartiles are over rounds; ``spread_us`` = q3 - q1 is the noise the tuner respects.
    """

    collective: str
    backend: str
    algorithm: str  # variant label, e.g. 'chain:seg=256K'
    dtype: str
    op: str | None
    device: str
    size_bytes: int
    count: int
    nprocs: int
    nodes: int
    ppn: int
    median_us: float
    q1_us: float
    q3_us: float
    spread_us: float
    min_us: float
    max_us: float
    rounds: int
    iterations: int
    algbw_gbs: float
    busbw_gbs: float
    validation: str | None
    # Columns added with launches (legacy files lack them; reading fills these defaults).
    launch: int = 1  # the replica: launch k of every isolation group
    group: str = LEGACY_GROUP  # the isolation group the launch measured
    state: str = NORMAL  # the machine's state: NORMAL, OUTLYING or REMEASURED
    round_us: str = ""  # per-round times, space-separated, round order: paired by round
    ref_copy_us: str = ""  # per round: the reference memory copy (measurement.reference)
    ref_allreduce_us: str = ""  # per round: the reference 8-byte allreduce
    # Per rank, space-separated in rank order, over the candidate's timed calls
    # (measurement.ranks): median arrival after the earliest rank, median wait for the
    # last one, median finish after the earliest, 99th percentile of its own call times.
    rank_lag_us: str = ""
    rank_wait_us: str = ""
    rank_finish_us: str = ""
    rank_p99_us: str = ""


SWEEP_FIELDS = tuple(f.name for f in fields(SweepPoint))
PER_RANK_FIELDS = ("rank_lag_us", "rank_wait_us", "rank_finish_us", "rank_p99_us")
# A results file must have these to be continued (the per-rank columns are left out of
# rows appended to a file written before them).
APPENDABLE_FIELDS = tuple(name for name in SWEEP_FIELDS if name not in PER_RANK_FIELDS)
# Columns a results file may lack (written before launches existed), with their values.
OPTIONAL_FIELDS = {f.name: f.default for f in fields(SweepPoint) if f.default is not MISSING}
REQUIRED_FIELDS = tuple(name for name in SWEEP_FIELDS if name not in OPTIONAL_FIELDS)
POINT_KEY = (
    "nprocs",
    "nodes",
    "ppn",
    "collective",
    "backend",
    "algorithm",
    "dtype",
    "op",
    "device",
    "size_bytes",
    "launch",
    "group",
)


def _whole(value: object) -> int:
    """A focus file's whole number (a launch, a process count, a size), as int."""
    if isinstance(value, str) and value.isdigit() and len(value) < 19:
        return int(value)
    if not is_kind(value, int) or not 0 <= value < INT_LIMIT:
        raise ValueError(f"{describe(value)} is not a whole number of 0 or more")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{describe(value)} is not a name")
    return value


def round_values(text: object) -> np.ndarray:
    """The numbers of a space-separated per-round cell ('' or NaN: none)."""
    if not isinstance(text, str) or not text.strip():
        return np.zeros(0)
    return np.array([float(value) for value in text.split()])


def format_rounds(values: np.ndarray) -> str:
    """Per-round numbers as a results cell (three decimals, space-separated)."""
    return " ".join(f"{value:.3f}" for value in values)


# Columns a stored row cannot do without: its key and its statistics (op and validation
# may be empty: collectives without an op, rows from before validation was stored).
TEXT_FIELDS = ("collective", "backend", "algorithm", "dtype", "device")
NUMBER_FIELDS = tuple(f.name for f in fields(SweepPoint) if f.type in ("int", "float"))
INT_FIELDS = tuple(f.name for f in fields(SweepPoint) if f.type == "int")
# Per-round cells must stay text: one round's '12.5' would otherwise read as a number.
TEXT_COLUMNS = {name: str for name, default in OPTIONAL_FIELDS.items() if default == ""}
# Numbers a measurement cannot hold: a time, a count of rounds or a launch of 0 or below
# (a hand-edited -1 µs would rank first, a 0 would divide by zero). Sizes may be 0.
POSITIVE_FIELDS = (
    "median_us", "q1_us", "q3_us", "min_us", "max_us",
    "rounds", "iterations", "nprocs", "nodes", "ppn", "launch",
)  # fmt: skip
# Numbers that may be 0 (a barrier moves no bytes) but never below it: a size of -8
# would pass every other check and reach a table that no selector could load.
NON_NEGATIVE_FIELDS = ("size_bytes", "count")
# int64's range: a larger whole number would wrap around when typed (1e30 -> -2**63).
INT_LIMIT = 2**63
STATES = (NORMAL, OUTLYING, REMEASURED)
# A group is a backend's name (or 'shared' for legacy rows): a plain word.
GROUP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


class StoreError(UsageError):
    """The run directory cannot be written (a full disk, a file size limit, permissions):
    a clean message and exit 2 on every rank, like bad input. ``failure`` is what failed,
    without the advice (for mentioning it after another error)."""

    def __init__(self, failure: str, advice: str = "") -> None:
        super().__init__(f"{failure}: {advice}" if advice else failure)
        self.failure = failure


class RunStore:
    """Reads and appends a run directory."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir)

    @property
    def results_path(self) -> Path:
        """The CSV that points are appended to."""
        return self.path / RESULTS

    def create(self) -> None:
        """Make the directory (fine if it exists: --resume continues in it)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _write_error(self.path, exc) from None

    def lock(self, command: str | None = None, option: str = "-o") -> RunLock:
        """Hold the directory for this command (creating it), or refuse if another holds
        it; ``command``: this command line, for the message of the next one (default: this
        process's arguments); ``option``: the option that names the directory here."""
        self.create()
        return RunLock(self.path / LOCK, command, option)

    def append(self, points: list[SweepPoint]) -> None:
        """Append points and flush them to disk at once (a row cut short by a full disk
        is cut off first, so no row is written onto it)."""
        self.append_rows(RESULTS, SWEEP_FIELDS, (asdict(point) for point in points))

    def append_rows(self, name: str, columns: Sequence[str], rows: Iterable[Mapping]) -> None:
        """Append ``rows`` to the directory's CSV file ``name`` as points are appended: a
        row cut short is cut off first, a new file gets ``columns`` as its header (an
        existing one keeps its own), and the rows are on disk before this returns."""
        path = self.path / name
        try:
            header = _header_of(path)
            with path.open("a+b") as raw:
                _cut_partial_line(raw)
                new = raw.tell() == 0
                with io.TextIOWrapper(raw, newline="", write_through=True) as handle:
                    writer = csv.DictWriter(handle, header or columns, extrasaction="ignore")
                    if new:
                        writer.writeheader()
                    writer.writerows(rows)
                    handle.flush()
                    os.fsync(handle.fileno())
        except OSError as exc:
            raise _write_error(path, exc) from None

    def write_rows(self, name: str, columns: Sequence[str], rows: Iterable[Mapping]) -> None:
        """Replace the directory's CSV file ``name`` by ``columns`` and ``rows``, atomically."""
        text = io.StringIO()
        writer = csv.DictWriter(text, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        self.write_text(name, text.getvalue())

    def write_text(self, name: str, text: str) -> None:
        """Replace the directory's file ``name`` atomically (a failed write leaves the old one)."""
        path = self.path / name
        try:
            write_text_atomic(path, text, run_store=True)
        except OSError as exc:
            raise _write_error(path, exc) from None

    def drop_rows(self, dropped: Callable[[dict[str, str]], bool]) -> int:
        """Remove from results.csv the whole rows for which ``dropped`` (the row's fields
        by column, as text) is true, atomically; lines that are not whole rows stay. The
        number removed."""
        path = self.results_path
        if not path.is_file():
            return 0
        try:
            lines = _decode(path, path.read_bytes()).split("\n")
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it ({exc.strerror})") from None
        header = _split_row(lines[0]) or []
        kept = [lines[0]]
        for line in lines[1:]:
            fields = _split_row(line)
            whole = fields is not None and len(fields) == len(header)
            if not (whole and dropped(dict(zip(header, fields, strict=True)))):
                kept.append(line)
        if len(kept) < len(lines):
            self.write_text(RESULTS, "\n".join(kept))
        return len(lines) - len(kept)

    def check_appendable(self) -> None:
        """Refuse to resume a results file of the older layout (no launch columns): rows of
        two layouts cannot share one CSV header."""
        header = _header_of(self.results_path)
        missing = [name for name in APPENDABLE_FIELDS if header and name not in header]
        if missing:
            raise UsageError(
                f"{self.results_path} was written before launches were recorded (no "
                f"{', '.join(missing)} columns): it can be read, tuned and compared, not "
                "continued; sweep into a new directory"
            )

    def read(self) -> tuple[pd.DataFrame, list[str]]:
        """All readable points so far (an empty frame with the columns if none), and a
        note on the rows dropped (cut short, wrong field count, missing statistics)."""
        path = self.results_path
        if not path.exists():
            return _empty(), []
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it ({exc.strerror})") from None
        frame, dropped = _parse_results(path, _decode(path, data))
        return frame, [_dropped_note(path, dropped)] if dropped else []

    def load(self) -> pd.DataFrame:
        """All readable points so far; dropped rows are counted in a warning on stderr."""
        frame, notes = self.read()
        for note in notes:
            print(f"osu-dl-bench: warning: {note}", file=sys.stderr, flush=True)
        return frame

    def finished_points(self) -> set[tuple]:
        """Keys (POINT_KEY order) of the points already stored, for --resume; dropped rows
        are not finished, so they are measured again."""
        frame = self.read()[0]
        # pandas 3's 'str' dtype keeps NaN after where(..., None): go through object.
        frame["op"] = frame["op"].astype(object).where(frame["op"].notna(), None)
        return {tuple(row) for row in frame[list(POINT_KEY)].itertuples(index=False)}

    def read_focus(self) -> dict[int, frozenset]:
        """An adaptive sweep's focus: launch number -> the (FOCUS_KEY order) candidates it
        measures; empty for a sweep that measures every candidate in every launch."""
        path = self.path / FOCUS
        if not os.path.lexists(path):
            return {}
        try:
            launches = load_json(path)["launches"]
            return {
                _whole(launch): frozenset(
                    (_whole(p), _text(c), _whole(s), _text(a)) for p, c, s, a in entry["points"]
                )
                for launch, entry in launches.items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            why = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
            raise UsageError(f"{path}: not an adaptive sweep's focus file ({why})") from None

    def write_focus(self, launch: int, points: list[tuple], reasons: list[str]) -> None:
        """Record what launch ``launch`` measures (FOCUS_KEY tuples) and why, atomically,
        beside the focus of the launches before it; a launch already recorded keeps its
        record (UsageError if it would change): why its launches were spent is the run's."""
        path = self.path / FOCUS
        recorded = self.read_focus()  # a damaged file is one message, not a traceback
        if launch in recorded:
            if recorded[launch] == frozenset(points):
                return
            raise UsageError(
                f"{path}: launch {launch}'s focus is recorded and differs from what these "
                "options would measure; a record of why launches were spent is never "
                "rewritten: resume with the options the run was measured with"
            )
        known = load_json(path) if recorded else {"launches": {}}
        known["launches"][str(launch)] = {
            "points": [list(point) for point in sorted(points)],
            "reasons": reasons,
        }
        self.write_text(FOCUS, json.dumps(known, indent=1))

    def read_metadata(self) -> dict[str, Any]:
        """The metadata file, or an empty skeleton."""
        path = self.path / METADATA
        if not path.exists():
            return {"schema_version": SCHEMA_VERSION, "jobs": {}}
        try:
            metadata = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} line {exc.lineno}: not JSON ({exc.msg})") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: cannot read it ({exc})") from None
        problem = _metadata_problem(metadata)
        if problem:
            raise UsageError(f"{path}: not a sweep's metadata ({problem})")
        return metadata

    def write_metadata(self, metadata: dict[str, Any]) -> None:
        """Write the metadata file atomically (a failed write leaves the old one)."""
        self.write_text(
            METADATA, json.dumps({"schema_version": SCHEMA_VERSION, **metadata}, indent=1)
        )

    def write_parquet(self) -> Path | None:
        """Copy the results to Parquet when pyarrow is installed."""
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            return None
        target = self.path / RESULTS_PARQUET
        try:
            self.read()[0].to_parquet(target, index=False)
        except OSError as exc:
            raise _write_error(target, exc) from None
        return target


# The metadata fields that readers take apart, and the JSON type each must have.
METADATA_FIELD_TYPES = {
    "jobs": dict,
    "sessions": list,
    "launch_orders": list,
    "submissions": list,
    "stalls": list,
    "hosts": list,
    "nprocs": list,
    "collectives": list,
}
# The fields of a job entry (and of the run) that are counts.
COUNT_FIELDS = ("nprocs", "nodes", "ppn")


def _metadata_problem(metadata: Any) -> str | None:
    """What makes ``metadata`` unreadable as a run's metadata (None if nothing does)."""
    if not isinstance(metadata, dict):
        return f"expected a JSON object, got {type_name(metadata)}"
    for name, kind in METADATA_FIELD_TYPES.items():
        if name in metadata and not isinstance(metadata[name], kind):
            return f"{name}: expected {kind_text(kind)}, got {type_name(metadata[name])}"
    for count, job in metadata.get("jobs", {}).items():
        if not isinstance(job, dict):
            return f"jobs.{count}: expected an object, got {type_name(job)}"
        for name in (n for n in COUNT_FIELDS if n in job and not is_count(job[n])):
            return f"jobs.{count}.{name}: expected a whole number, got {type_name(job[name])}"
    for name in (n for n in ("nodes", "ppn") if n in metadata and not is_count(metadata[n])):
        return f"{name}: expected a whole number, got {type_name(metadata[name])}"
    if not all(map(is_count, metadata.get("nprocs", []))):
        return "nprocs: expected a list of whole numbers"
    return None


class RunLock:
    """An exclusive flock on the run directory's lock file, held until released (or the
    process ends: the kernel drops it, so a killed command leaves no stale lock). The file
    says who holds it: pid and host, then the command line (``command``; default this
    process's arguments). A second command is refused with the holder's words and the
    ``option`` by which it named the directory."""

    def __init__(self, path: Path, command: str | None = None, option: str = "-o") -> None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _write_error(path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, HOLDER_BYTES).decode(errors="replace")
            os.close(fd)
            raise UsageError(
                f"{path.parent} is in use by {_holder_text(holder)}: wait for it to end, "
                f"or choose another {option}"
            ) from None
        self.fd = fd
        command = command_line() if command is None else command
        # Who holds it, for the message of the next command; a full disk only loses that.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            owner = f"pid {os.getpid()} on {socket.gethostname()}\n{_one_line(command)}\n"
            os.write(fd, owner.encode())

    def release(self) -> None:
        """Let the next command in (the file stays: removing it would race with a new lock)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# The most of a lock file's holder that a refusal reads (its command line may be long).
HOLDER_BYTES = 4096


def _one_line(text: str) -> str:
    """``text`` on one line (a quoted argument may hold a newline)."""
    return " ".join(text.split("\n"))


def _holder_text(holder: str) -> str:
    """Who holds a lock, from its file: 'another run (pid P on H: COMMAND)'; a file of an
    older version holds no command line, an empty one (a holder that could not write it)
    says nothing."""
    who, _, command = holder.strip().partition("\n")
    if command.strip():
        who = f"{who}: {command.strip()}"
    return f"another run ({who})" if who else "another run"


# The errors a write meets when space runs out: a full disk, a quota, a file size limit.
OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _write_error(path: Path, exc: OSError) -> StoreError:
    """The message for a write that failed: what is kept and how to go on."""
    remedy = "make room" if exc.errno in OUT_OF_SPACE else "make it writable"
    return StoreError(
        f"cannot write {path} ({exc.strerror or exc})",
        f"the results stored before it are kept; {remedy} and run it again (a sweep: with "
        "--resume)",
    )


def _cut_partial_line(handle: io.BufferedRandom) -> None:
    """Truncate a file (opened 'a+b') after its last newline, leaving it at the end."""
    end = handle.seek(0, os.SEEK_END)
    pos = end
    while pos > 0:
        start = max(0, pos - 65536)
        handle.seek(start)
        found = handle.read(pos - start).rfind(b"\n")
        if found >= 0:
            pos = start + found + 1
            break
        pos = start
    if pos != end:
        handle.truncate(pos)
    handle.seek(pos)


HEADER_LINE = ",".join(SWEEP_FIELDS)


def _empty() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(columns=SWEEP_FIELDS)


def _header_of(path: Path) -> list[str] | None:
    """The first line's fields of an existing results file (None if it has none)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            first = handle.readline()
    except (OSError, UnicodeDecodeError):
        return None
    return _split_row(first) if first.endswith("\n") else None


def _decode(path: Path, data: bytes) -> str:
    try:
        # utf-8-sig: a byte-order mark (spreadsheets write one) is not part of the header.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{path} line {line}: not UTF-8 text ({exc.reason})") from None


def _parse_results(path: Path, text: str) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    """The rows that are whole and complete, and (line, reason) for each one dropped."""
    import pandas as pd

    lines = text.split("\n")
    cut = lines.pop()  # what follows the last newline: a row cut short, or ''
    if not lines:  # not even a whole header line
        if cut and not HEADER_LINE.startswith(cut.rstrip("\r")):
            _check_header(path, _split_row(cut) or [])
        return _empty(), [(1, "cut short")] if cut else []
    header = _split_row(lines[0]) or []
    _check_header(path, header)
    whole, numbers, dropped = [lines[0]], [], []
    for number, line in enumerate(lines[1:], start=2):
        values = _split_row(line)
        if not line.strip():
            continue  # blank lines are skipped, as pandas does
        if values is None:
            dropped.append((number, "not CSV"))
        elif len(values) != len(header):
            dropped.append((number, f"{len(values)} fields, expected {len(header)}"))
        else:
            whole.append(line)
            numbers.append(number)
    if cut:
        dropped.append((len(lines) + 1, "cut short"))
    # pandas types the whole rows as it always has; each is valid CSV on its own line.
    # Only an empty cell is missing: pandas' default also reads 'nan', 'NA' or 'null' as
    # missing, which would turn a round_us of 'nan' into a legacy row and a group of 'NA'
    # into 'shared' without a word.
    text = io.StringIO("\n".join(whole))
    frame = pd.read_csv(text, dtype=TEXT_COLUMNS, keep_default_na=False, na_values=[""])
    frame = with_defaults(frame)
    frame.index = pd.Index(numbers, dtype="int64")
    frame, incomplete = _typed(frame)
    return frame.reset_index(drop=True), sorted(dropped + incomplete)


def with_defaults(
    frame: pd.DataFrame, defaults: Mapping[str, Any] = OPTIONAL_FIELDS
) -> pd.DataFrame:
    """Columns a legacy file lacks, and empty cells of the optional ones, get their
    defaults (launch 1, group 'shared', state 'normal', no per-round data); changes and
    returns ``frame``."""
    for name, default in defaults.items():
        if name not in frame.columns:
            frame[name] = default
        else:
            frame[name] = frame[name].astype(object).where(frame[name].notna(), default)
    return frame


def _split_row(line: str) -> list[str] | None:
    """One CSV line's fields (None if it is not CSV on its own, e.g. an open quote)."""
    try:
        return next(csv.reader([line.rstrip("\r")], strict=True), [])
    except csv.Error:
        return None


def _check_header(path: Path, header: list[str]) -> None:
    missing = set(REQUIRED_FIELDS) - set(header)
    if missing:
        raise UsageError(
            f"{path} line 1: not a sweep results file, missing columns {', '.join(sorted(missing))}"
        )


def _typed(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    """Numbers as numbers; rows missing a key field or a statistic are dropped, each with
    the first reason (a row cut after its key fields must not count as measured)."""
    import pandas as pd

    reasons: dict[int, str] = {}
    for name in (*TEXT_FIELDS, *NUMBER_FIELDS):
        raw = frame[name]
        if name in NUMBER_FIELDS:
            frame[name] = pd.to_numeric(raw, errors="coerce")
            # An infinite statistic would rank or divide as a real time: drop it like NaN.
            infinite = frame[name].isin([math.inf, -math.inf])
            for number in frame.index[infinite]:
                reasons.setdefault(number, f"{name} {str(raw[number])!r} is not a finite number")
            frame[name] = frame[name].where(~infinite)
        if name in INT_FIELDS:
            whole = (frame[name] % 1 == 0) & (frame[name].abs() < INT_LIMIT)
            for number in frame.index[frame[name].notna() & ~whole]:
                reasons.setdefault(number, f"{name} {str(raw[number])!r} is not a whole number")
            frame[name] = frame[name].where(whole)
        if name in POSITIVE_FIELDS:
            for number in frame.index[frame[name] <= 0]:
                reasons.setdefault(number, f"{name} {str(raw[number])!r} is not above 0")
        if name in NON_NEGATIVE_FIELDS:
            for number in frame.index[frame[name] < 0]:
                reasons.setdefault(number, f"{name} {str(raw[number])!r} is below 0")
        for number in frame.index[frame[name].isna()]:
            reasons.setdefault(number, _missing(name, raw[number]))
    for number, why in [*_layout_problems(frame), *_launch_problems(frame)]:
        reasons.setdefault(number, why)
    frame = frame.drop(index=list(reasons)).astype({name: "int64" for name in INT_FIELDS})
    return frame, list(reasons.items())


def _layout_problems(frame: pd.DataFrame) -> list[tuple[int, str]]:
    """(line, reason) for rows whose nodes and ppn cannot hold their nprocs ranks."""
    columns = ["nprocs", "nodes", "ppn"]
    found = []
    for counts, rows in frame.dropna(subset=columns).groupby(columns):
        problem = JobShape(*(int(c) for c in counts)).problem()
        found += [(number, problem) for number in rows.index] if problem else []
    return found


def _launch_problems(frame: pd.DataFrame) -> list[tuple[int, str]]:
    """(line, reason) for rows whose launch columns cannot be used: a group that is no
    backend's name, a state a sweep does not write, per-round cells that are not positive
    times."""
    found = []
    groups = frame["group"].astype(str)
    for number in frame.index[~groups.str.fullmatch(GROUP_NAME.pattern)]:
        found.append((number, f"group {groups[number]!r} is not a backend's name"))
    states = frame["state"].astype(str)
    for number in frame.index[~states.isin(STATES)]:
        found.append((number, f"state {states[number]!r} is not one of {', '.join(STATES)}"))
    for name in TEXT_COLUMNS:
        for number, text in zip(frame.index, frame[name], strict=True):
            why = _rounds_problem(name, text) if isinstance(text, str) and text else None
            if why:
                found.append((number, why))
    return found


def _rounds_problem(name: str, text: str) -> str | None:
    """Why a per-round cell is not positive finite times (per-rank cells: not negative,
    the earliest rank's lag is 0). Its count may differ from the row's rounds (the paired
    ratio uses the values it holds; one value cannot place a candidate below its
    reference, see selection.paired)."""
    may_be_zero = name in PER_RANK_FIELDS
    for value in text.split():
        try:
            number = float(value)
        except ValueError:
            return f"{name} holds {value[:20]!r}, expected a time in µs"
        if not (math.isfinite(number) and (number > 0 or (may_be_zero and number == 0))):
            kind = "a finite time of 0 or more" if may_be_zero else "a positive finite time"
            return f"{name} holds {value[:20]!r}, expected {kind} in µs"
    return None


def _missing(name: str, raw: object) -> str:
    import pandas as pd

    if pd.isna(raw) or str(raw).strip().lower() == "nan":
        return f"no {name}"
    return f"{name} {str(raw)!r} is not a number"


def _dropped_note(path: Path, dropped: list[tuple[int, str]]) -> str:
    """One line counting the dropped rows and naming the first few."""
    named = "; ".join(f"line {n}: {why}" for n, why in dropped[:NAMED_LINES])
    more = f"; {len(dropped) - NAMED_LINES} more" if len(dropped) > NAMED_LINES else ""
    rows = "row" if len(dropped) == 1 else "rows"
    return (
        f"{path}: dropped {len(dropped)} {rows} that cannot be used ({named}{more}); they "
        "count as not measured, so --resume measures them again"
    )
