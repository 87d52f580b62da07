"""Each rank's heartbeat: a small file of fixed layout that the rank keeps current through a
shared memory map (plain stores, no system call per update), so that the process that
launched the job can read, without MPI, what every rank last did when the job stalls.

The launcher makes one file per rank (``create_files``: its blocks are written there, so a
full disk fails then, in the launcher, and never as SIGBUS in a rank writing to a hole)
in a directory it names to the ranks in OSU_DL_BENCH_HEARTBEAT_DIR; each rank maps its
own file (``start``) before MPI starts. A rank records:

- who it is: rank, host, pid and when it started;
- what it does: the point (collective, size in bytes, the candidates' labels) and the
  phase (start-up, check, iterations, round r, exchange, between points, model
  calibration);
- where it is among the calls: each pass of the kernel over its candidates (a check, a
  pass that fixes the iterations per round, a timed round) is a numbered step, and a
  call's position is ``step << 32 | its number in the step``. The kernel stores the
  position of the call it enters and, once the call returns, of the call it completed:
  two stores per call, outside the timer (``Heartbeat.step``). Every rank of a job runs
  the same steps, so positions compare across ranks: a rank whose entered position is
  behind the others' never arrived at the call they are in;
- that it is alive: a daemon thread rewrites the tick time every TICK_SECONDS and makes
  no MPI call, so a stopped process (SIGSTOP, a debugger) shows a tick that stands still
  while the ranks blocked in a collective waiting for it keep ticking. The thread also
  flushes the file to its file system (fdatasync), for a launcher that reads it from
  another host over a shared file system.

Nothing here imports MPI. ``read`` never trusts a file: a missing, short or damaged one
gives a Beat that says so, never an exception.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import socket
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Where the launcher put the ranks' files (set in the job's environment).
DIRECTORY_ENV = "OSU_DL_BENCH_HEARTBEAT_DIR"
# Seconds between two liveness ticks.
TICK_SECONDS = 1.0
# Written first by a rank that has mapped its file; 0: the rank never opened it.
MAGIC = 0x31544145424C4448  # b"HDLBEAT1", little-endian
# Steps and points kept: a call's position names a step, at most a few steps back.
RING = 4
# Candidates of a step whose order is kept (a call beyond them is named by number).
MAX_ORDER = 256
LABEL_BYTES = 4096
# A call's position: its step's number above this many bits, its number in the step below.
POSITION_BITS = 32
PHASES = (
    "start-up",
    "between points",
    "check",
    "iterations",  # the passes of kernel.iteration_count
    "round",
    "exchange",
    "model calibration",
)

STEP = np.dtype(
    [
        ("id", "i8"),  # 0: an empty slot
        ("point", "i8"),  # the point's id
        ("phase", "i8"),  # index into PHASES
        ("round", "i8"),
        ("repeats", "i8"),  # calls of each candidate in the step
        ("interleaved", "i8"),  # 1: one call of every candidate per repeat
        ("candidates", "i8"),
        ("order", "i2", (MAX_ORDER,)),  # the candidates' indices, in the order called
    ]
)
POINT = np.dtype(
    [
        ("id", "i8"),
        ("size_bytes", "i8"),
        ("collective", "S32"),
        ("labels", f"S{LABEL_BYTES}"),  # the candidates' labels, one per line
    ]
)
LAYOUT = np.dtype(
    [
        ("magic", "i8"),
        ("pid", "i8"),
        ("rank", "i8"),
        ("phase", "i8"),
        ("round", "i8"),
        ("point", "i8"),  # the current point's id (0: none yet)
        ("step", "i8"),  # the latest step's id
        ("entered", "i8"),  # the position of the last call entered
        ("completed", "i8"),  # the position of the last call completed
        ("started", "f8"),  # time.time() when the rank mapped its file
        ("tick", "f8"),  # time.time() at the latest liveness tick
        ("progress", "f8"),  # the tick at which ``completed`` last moved
        ("host", "S64"),
        ("steps", STEP, (RING,)),
        ("points", POINT, (RING,)),
    ]
)
FILE_BYTES = LAYOUT.itemsize
_MARKS = LAYOUT.fields["entered"][1]  # entered and completed are adjacent int64s
assert LAYOUT.fields["completed"][1] == _MARKS + 8


def file_name(rank: int) -> str:
    """The heartbeat file of ``rank`` in the job's directory."""
    return f"rank-{rank}"


def create_files(directory: Path, nprocs: int) -> None:
    """Make the job's directory and one zeroed file per rank, every block written (an
    OSError, a full disk included, is the caller's to report). A link in the run
    directory is never followed and a FIFO never opened: whatever sits at a file's name
    (an earlier job's file, or a link planted to results.csv) is replaced, not written."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    parent_fd = _open_folder(directory.parent)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory.name, 0o755, dir_fd=parent_fd)
        folder_fd = _open_folder(directory, directory.name, parent_fd)
    finally:
        os.close(parent_fd)
    try:
        for rank in range(nprocs):
            _create_zeroed(folder_fd, directory / file_name(rank))
    finally:
        os.close(folder_fd)


def _open_folder(path: Path, name: str | None = None, dir_fd: int | None = None) -> int:
    """A descriptor of the folder ``path`` (``name`` in ``dir_fd``), never through a link."""
    try:
        return os.open(
            path if name is None else name,
            os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise OSError(exc.errno, "a symbolic link, not followed", str(path)) from None
        raise


def _create_zeroed(folder_fd: int, path: Path) -> None:
    """A new file ``path`` in the open folder, FILE_BYTES of zeros, every block written."""
    # The entry is removed, never what it points to (unlink does not follow a link);
    # O_EXCL then creates the file anew, so neither a link nor a FIFO is ever opened
    # (open(2): "O_EXCL ... symbolic links are not followed").
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path.name, dir_fd=folder_fd)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(path.name, flags, 0o644, dir_fd=folder_fd)
    try:
        if os.write(fd, bytes(FILE_BYTES)) != FILE_BYTES:
            raise OSError(f"short write to {path}")
    finally:
        os.close(fd)


# --- the rank's side ----------------------------------------------------------------------


class Heartbeat:
    """This rank's mapped heartbeat file (see the module's docstring)."""

    def __init__(self, path: Path, rank: int) -> None:
        fd = _open_regular(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < FILE_BYTES:
                raise OSError(f"{path} is shorter than a heartbeat file ({FILE_BYTES} bytes)")
            self._map = mmap.mmap(fd, FILE_BYTES)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._map[:] = bytes(FILE_BYTES)  # whatever an earlier job left there
        self._record = np.ndarray((), LAYOUT, buffer=self._map)
        self._marks = memoryview(self._map)[_MARKS : _MARKS + 16].cast("q")
        self._last_completed = 0
        record = self._record
        record["pid"], record["rank"] = os.getpid(), rank
        record["host"] = socket.gethostname().encode()[:64]
        record["started"] = record["tick"] = record["progress"] = time.time()
        record["magic"] = MAGIC

    def phase(self, name: str, round_number: int = 0) -> None:
        """Record what the rank does now (one of PHASES; round: a timed round's number)."""
        self._record["phase"] = PHASES.index(name)
        self._record["round"] = round_number

    def point(self, collective: str, size_bytes: int, labels: Sequence[str]) -> None:
        """Record the point the rank measures next, with its candidates' labels."""
        record = self._record
        ident = int(record["point"]) + 1
        text = "\n".join(labels).encode()[:LABEL_BYTES]
        record["points"][ident % RING] = (ident, size_bytes, collective.encode()[:32], text)
        record["point"] = ident

    def step(self, order: Sequence[int], repeats: int, interleaved: bool) -> tuple[memoryview, int]:
        """Start a step: the candidates called in ``order``, ``repeats`` calls each (one of
        every candidate per repeat if ``interleaved``). Returns the marks (the caller
        stores the position of a call in marks[0] on entering it and in marks[1] once it
        returned) and the position before the step's first call (add 1 per call)."""
        record = self._record
        ident = int(record["step"]) + 1
        order = list(order)
        slot = record["steps"][ident % RING]
        slot["order"][: min(len(order), MAX_ORDER)] = order[:MAX_ORDER]
        for name in ("point", "phase", "round"):
            slot[name] = record[name]
        slot["repeats"], slot["interleaved"], slot["candidates"] = repeats, interleaved, len(order)
        slot["id"] = ident
        record["step"] = ident
        return self._marks, ident << POSITION_BITS

    def tick(self) -> None:
        """Record that the rank is alive (and when its last call completed), then flush."""
        record, now = self._record, time.time()
        if self._marks[1] != self._last_completed:
            self._last_completed = self._marks[1]
            record["progress"] = now
        record["tick"] = now
        with contextlib.suppress(OSError):
            os.fdatasync(self._fd)

    def keep_ticking(self) -> None:
        """Tick every TICK_SECONDS in a daemon thread, for the process's lifetime."""

        def run() -> None:
            while True:
                self.tick()
                time.sleep(TICK_SECONDS)

        threading.Thread(target=run, name="osu-dl-bench-heartbeat", daemon=True).start()


class NoHeartbeat:
    """Stands in where there is no heartbeat file: the same calls, recording nothing."""

    def __init__(self) -> None:
        self._marks = memoryview(bytearray(16)).cast("q")

    def phase(self, name: str, round_number: int = 0) -> None:
        """Nothing to record."""

    def point(self, collective: str, size_bytes: int, labels: Sequence[str]) -> None:
        """Nothing to record."""

    def step(self, order: Sequence[int], repeats: int, interleaved: bool) -> tuple[memoryview, int]:
        """Marks that nobody reads."""
        return self._marks, 0


_current: Heartbeat | NoHeartbeat = NoHeartbeat()


def current() -> Heartbeat | NoHeartbeat:
    """This process's heartbeat (a NoHeartbeat unless ``start`` opened one)."""
    return _current


def start(directory: str | os.PathLike, rank: int) -> None:
    """Map ``rank``'s file in ``directory`` as this process's heartbeat and keep it ticking
    (an OSError if the file cannot be opened and mapped)."""
    global _current
    beat = Heartbeat(Path(directory) / file_name(rank), rank)
    beat.keep_ticking()
    _current = beat


def start_from_environment(rank: int) -> str | None:
    """``start`` in the directory DIRECTORY_ENV names, if it names one; a warning to show
    if the file cannot be used (the job then runs without a heartbeat)."""
    directory = os.environ.get(DIRECTORY_ENV)
    if not directory:
        return None
    try:
        start(directory, rank)
    except (OSError, ValueError) as exc:
        return (
            f"rank {rank} keeps no heartbeat ({Path(directory) / file_name(rank)}: "
            f"{getattr(exc, 'strerror', None) or exc}): a stall report cannot show its steps"
        )
    return None


def start_for_this_rank() -> None:
    """This rank's heartbeat, before MPI starts, where the job's launcher asked for one (a
    rank stuck in MPI's start-up shows as such in a stall report); a warning if it cannot."""
    import sys

    from osu_dl_bench.runtime.launcher import launcher_rank

    warning = start_from_environment(launcher_rank())
    if warning:
        print(f"osu-dl-bench: warning: {warning}", file=sys.stderr, flush=True)


# --- the launcher's side ------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One call of the kernel as a heartbeat records it: the point, the phase, and the
    candidate (its label, or '#k') and iteration where the step says."""

    collective: str | None
    size_bytes: int | None
    phase: str
    round_number: int
    candidate: str | None
    iteration: int | None  # from 0
    iterations: int | None  # of the candidate in the step


@dataclass(frozen=True)
class Beat:
    """What one rank's heartbeat file says; ``problem`` is why it says nothing (no file, a
    file the rank never opened, a short or damaged one), None when it was read."""

    rank: int
    problem: str | None = None
    host: str = ""
    pid: int = 0
    started: float = 0.0
    tick: float = 0.0
    progress: float = 0.0
    phase: str = ""
    round_number: int = 0
    point: tuple[str, int] | None = None  # (collective, size in bytes) of the current point
    entered: int = 0
    completed: int = 0
    entered_call: Call | None = None
    completed_call: Call | None = None


def _open_regular(path: Path, flags: int) -> int:
    """A descriptor of the regular file ``path``, neither through a link nor blocking on a
    FIFO (OSError otherwise)."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


def read(path: Path, rank: int) -> Beat:
    """The heartbeat in ``path`` (a rank's file), never raising on a bad one."""
    try:
        with os.fdopen(_open_regular(path, os.O_RDONLY), "rb") as handle:
            data = handle.read(FILE_BYTES)
    except FileNotFoundError:
        return Beat(rank, "no heartbeat file")
    except OSError as exc:
        return Beat(rank, f"heartbeat file unreadable ({exc.strerror or exc})")
    if len(data) < FILE_BYTES:
        return Beat(rank, f"heartbeat file cut short ({len(data)} of {FILE_BYTES} bytes)")
    record = np.frombuffer(data, LAYOUT, count=1)[0]
    magic = int(record["magic"])
    if magic == 0:
        return Beat(rank, "the rank never opened its heartbeat file")
    if magic != MAGIC:
        return Beat(rank, "not a heartbeat file")
    try:
        return _decoded(record, rank)
    except (ValueError, IndexError, OverflowError) as exc:
        return Beat(rank, f"heartbeat file damaged ({exc})")


def _decoded(record: np.void, rank: int) -> Beat:
    entered, completed = int(record["entered"]), int(record["completed"])
    point = _point(record, int(record["point"]))
    return Beat(
        rank=rank,
        host=_text(record["host"]),
        pid=int(record["pid"]),
        started=float(record["started"]),
        tick=float(record["tick"]),
        progress=float(record["progress"]),
        phase=_phase(int(record["phase"])),
        round_number=int(record["round"]),
        point=None if point is None else (_text(point["collective"]), int(point["size_bytes"])),
        entered=entered,
        completed=completed,
        entered_call=_call(record, entered),
        completed_call=_call(record, completed),
    )


def _text(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", "replace")


def _phase(index: int) -> str:
    return PHASES[index] if 0 <= index < len(PHASES) else f"phase {index}"


def _point(record: np.void, ident: int) -> np.void | None:
    slot = record["points"][ident % RING] if ident > 0 else None
    return slot if slot is not None and int(slot["id"]) == ident else None


def _call(record: np.void, position: int) -> Call | None:
    """The call at ``position`` (None: no call yet, or its step has left the ring)."""
    ident, number = position >> POSITION_BITS, position & ((1 << POSITION_BITS) - 1)
    if ident <= 0 or number <= 0:
        return None
    step = record["steps"][ident % RING]
    if int(step["id"]) != ident:
        return None
    point = _point(record, int(step["point"]))
    candidates, repeats = int(step["candidates"]), int(step["repeats"])
    candidate = iteration = None
    if candidates > 0 and repeats > 0:
        if step["interleaved"]:
            iteration, k = divmod(number - 1, candidates)
        else:
            k, iteration = divmod(number - 1, repeats)
        candidate = _label(point, int(step["order"][k])) if k < MAX_ORDER else f"#{k}"
    return Call(
        collective=None if point is None else _text(point["collective"]),
        size_bytes=None if point is None else int(point["size_bytes"]),
        phase=_phase(int(step["phase"])),
        round_number=int(step["round"]),
        candidate=candidate,
        iteration=iteration,
        iterations=repeats if repeats > 0 else None,
    )


def _label(point: np.void | None, index: int) -> str:
    labels = _text(point["labels"]).split("\n") if point is not None else []
    return labels[index] if 0 <= index < len(labels) and labels[index] else f"#{index}"
