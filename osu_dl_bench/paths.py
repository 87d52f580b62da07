"""Files the run writes: checks, made before the run, that they can be written, and the one
atomic writer (temp file, fsync, rename) every output goes through."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from osu_dl_bench.errors import UsageError


def check_writable_file(option: str, path: str | None) -> None:
    """UsageError naming ``option`` unless ``path`` names a file this process can create
    (not a directory, in an existing directory it may write to)."""
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{option} {path}: is a directory: expected a file name")
    parent = target.resolve().parent
    if parent.exists() and not parent.is_dir():
        raise UsageError(f"{option} {path}: {parent} is not a directory")
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: directory {parent} does not exist")
    probe_directory(option, path, parent)


def probe_directory(option: str, path: str, directory: Path) -> None:
    """Create and remove a file in ``directory``: the one test of permissions that also
    holds for root, read-only mounts and /proc."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".osu-dl-bench-probe-", dir=directory)
    except OSError as exc:
        raise UsageError(
            f"{option} {path}: cannot create files in {directory}: {exc.strerror or exc}"
        ) from None
    os.close(fd)
    os.unlink(probe)


def fsync_directory(path: Path) -> None:
    """Make the entries of directory ``path`` durable: a rename lives in the directory,
    and fsyncing the file alone leaves it to the file system's whim."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` then rename over ``path``: readers see the old file or the whole new
    one, never half of one. The data is on disk before the rename and the rename before
    returning; on any failure (a full disk, an interrupt) the temp file is removed and the
    previous file stays."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
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
