"""Files the run writes: checks, made before the run, that they can be written, and the one
atomic writer (temp file, fsync, rename) every output goes through."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from osu_dl_bench.errors import UsageError

# A run directory's own files (the layout measurement/store.py documents and names from
# here): what a command writes elsewhere must never replace them, whatever -o says.
RESULTS = "results.csv"
RESULTS_PARQUET = "results.parquet"
METADATA = "metadata.json"
FOCUS = "focus.json"
LOCK = "sweep.lock"
HEARTBEATS = "heartbeats"
# The model's calibration rows and their record (measurement/calibration.py), measured
# into the run directory by a sweep's launches or by `model fit --calibrate`.
CALIBRATION_CSV = "calibration.csv"
CALIBRATION_JSON = "calibration.json"
# The between-period component compare of two sweeps stores with the later run
# (selection/period.py), read by tune of that run.
PERIOD = "period.json"
RUN_FILES = (
    RESULTS,
    RESULTS_PARQUET,
    METADATA,
    FOCUS,
    LOCK,
    CALIBRATION_CSV,
    CALIBRATION_JSON,
    PERIOD,
)
# What makes a directory a run directory: a sweep writes its lock first, metadata soon.
RUN_MARKS = (METADATA, LOCK)


def check_writable_file(option: str, path: str | None, make_parents: bool = False) -> None:
    """UsageError naming ``option`` unless ``path`` names a file this process can create
    (not a directory, in a directory it may write to; with ``make_parents``, a directory
    it may create). Every OSError the check meets (a name too long, a symlink loop, a
    read-only mount) is that one message, never a traceback."""
    if path is None:
        return
    try:
        _check_file(option, path, make_parents)
    except OSError as exc:
        raise UsageError(f"{option} {path}: {os_reason(exc)}") from None


def check_new_file(option: str, path: str | None, who: str) -> None:
    """check_writable_file, and a UsageError if something is already at ``path``:
    ``who`` (a command, a script) never replaces a file another run wrote."""
    check_writable_file(option, path)
    if path is not None and os.path.lexists(path):
        raise UsageError(
            f"{option} {path}: already exists; {who} never replaces a file: choose a new name"
        )


def check_writable_directory(option: str, path: str | None) -> None:
    """UsageError naming ``option`` unless ``path`` is a directory this process can
    write to, or can create (its nearest existing ancestor is one it may write to)."""
    if path is None:
        return
    try:
        _check_directory(option, path, Path(os.path.abspath(path)))
    except OSError as exc:
        raise UsageError(f"{option} {path}: {os_reason(exc)}") from None


def os_reason(exc: OSError) -> str:
    """The operating system's words for ``exc`` (its strerror), without Python's."""
    return exc.strerror or str(exc)


def _check_file(option: str, path: str, make_parents: bool) -> None:
    target = Path(os.path.abspath(path))  # abspath: no file system access, no loop
    if make_parents:
        _check_directory(option, path, target.parent)
    else:
        parent = _existing(target.parent)
        if parent is None:
            raise UsageError(f"{option} {path}: directory {target.parent} does not exist")
        if not stat.S_ISDIR(parent.st_mode):
            raise UsageError(f"{option} {path}: {target.parent} is not a directory")
        probe_directory(option, path, target.parent)
    if _existing(target) is not None and target.is_dir():
        raise UsageError(f"{option} {path}: is a directory: expected a file name")
    refuse_run_file(option, path)
    # The name write_atomic writes first is longer than the target's own name.
    _existing(target.with_name(temp_name(target)))


def run_owning(path: str | os.PathLike) -> Path | None:
    """The run directory that holds ``path`` (where a write to it lands, symlinks followed)
    as its own file (RUN_FILES: results, metadata, focus, the lock, the calibration) or
    anything under heartbeats/; None when no run directory does."""
    target = Path(os.path.realpath(path))  # realpath: never raises, loops included
    if target.name in RUN_FILES and _is_run_directory(target.parent):
        return target.parent
    for folder in target.parents:
        if folder.name == HEARTBEATS and _is_run_directory(folder.parent):
            return folder.parent
    return None


def refuse_run_file(option: str, path: str | os.PathLike) -> None:
    """UsageError naming the file and the run when ``path`` is a run directory's own file:
    an output written there would replace measured results or the run's record."""
    run = run_owning(path)
    if run is not None:
        own = os.path.relpath(os.path.realpath(path), run)
        raise UsageError(
            f"{option} {path}: {own} belongs to the run directory {run} (its measurements "
            "and their record); write the output elsewhere"
        )


def _is_run_directory(directory: Path) -> bool:
    return any(os.path.lexists(directory / mark) for mark in RUN_MARKS)


def _check_directory(option: str, path: str, directory: Path) -> None:
    nearest = directory
    while (found := _existing(nearest)) is None:
        nearest = nearest.parent
    if not stat.S_ISDIR(found.st_mode):
        raise UsageError(f"{option} {path}: {nearest} is not a directory")
    probe_directory(option, path, nearest)


def _existing(path: Path) -> os.stat_result | None:
    """``path``'s status, None if nothing is there (or a file stands where a directory of
    the path should); other OSErrors (a name too long, a symlink loop, no permission to
    look) propagate."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def probe_directory(option: str, path: str, directory: Path) -> None:
    """Create and remove a file in ``directory``: the one test of permissions that also
    holds for root, read-only mounts and /proc."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".osu-dl-bench-probe-", dir=directory)
    except OSError as exc:
        raise UsageError(
            f"{option} {path}: cannot create files in {directory}: {os_reason(exc)}"
        ) from None
    os.close(fd)
    os.unlink(probe)


def temp_name(path: Path) -> str:
    """The name write_atomic writes ``path``'s data under before renaming it."""
    return f".{path.name}.tmp{os.getpid()}"


def fsync_directory(path: Path) -> None:
    """Make the entries of directory ``path`` durable: a rename lives in the directory,
    and fsyncing the file alone leaves it to the file system's whim."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: str | os.PathLike, text: str, run_store: bool = False) -> None:
    """Write ``text`` to ``path`` through write_atomic."""
    write_atomic(Path(path), lambda tmp: tmp.write_text(text), run_store)


def write_atomic(path: Path, write: Callable[[Path], None], run_store: bool = False) -> None:
    """``write(tmp)`` then rename over ``path``: readers see the old file or the whole new
    one, never half of one. The data is on disk before the rename and the rename before
    returning; on any failure (a full disk, an interrupt) the temp file is removed and the
    previous file stays. A run directory's own files are refused (UsageError) unless the
    caller is the run's store (``run_store``), which never writes through a symlink."""
    if not run_store:
        refuse_run_file("output", path)
    path = Path(path)
    if path.is_symlink() and run_store:
        # A run directory may be someone's archive: a link there must not let the run
        # replace whatever file it points to.
        raise UsageError(
            f"{path}: a symlink where the run keeps its own file; remove the link (the run "
            "writes its files in its own directory, never through a link)"
        )
    if path.is_symlink():  # write where the link points, as editors do; keep the link
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(temp_name(path))
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_directory(path.parent)
