"""Checks that a file the run will write at its end can be written, made before the run."""

from __future__ import annotations

import os
import tempfile
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
