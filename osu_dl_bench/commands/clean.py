"""``osu-dl-bench clean``: remove the shared-memory segments that killed or aborted MPICH
jobs left in /dev/shm.

MPICH's shared-memory transport keeps each job's segment in a file named
``mpich_shm_<id>_<n>`` (shared windows and their set-up use ``mpich_shar_tmp<X>``) and
removes it at MPI_Finalize; a job that ends any other way
(killed, MPI_Abort, a crash) leaves it there, holding memory until the next reboot.
A segment counts as stale only when it is this user's, older than ``--min-age`` (a job
creates it moments before mapping it), and no live process has it open or mapped: every
readable /proc/PID/fd and /proc/PID/maps is checked. No MPI is loaded.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from osu_dl_bench.errors import UsageError

SHM_DIR = Path("/dev/shm")
# The names MPICH gives its segment files (seen after killed jobs of the mpich wheel).
PREFIXES = ("mpich_shm_", "mpich_shar_tmp")
# Older than the moment between a job creating its segment and mapping it, with room for
# a loaded machine; a segment that young is never taken for stale.
MIN_AGE_S = 60.0
_PROC = Path("/proc")


@dataclass(frozen=True)
class CleanConfig:
    """Whether to remove or only list, how old a segment must be, and where to look."""

    dry_run: bool
    min_age: float
    dir: str


@dataclass(frozen=True)
class Segment:
    """A candidate segment file."""

    path: Path
    size: int
    age_s: float
    dev: int
    ino: int


def _candidates(directory: Path, uid: int, now: float) -> list[Segment]:
    """This user's regular files named like MPICH segments (symbolic links never)."""
    found = []
    for entry in sorted(directory.iterdir()):
        if not entry.name.startswith(PREFIXES):
            continue
        try:
            info = entry.lstat()
        except OSError:
            continue  # removed meanwhile
        if stat.S_ISREG(info.st_mode) and info.st_uid == uid:
            # Creating and sizing the segment set its mtime: its age is at least that.
            found.append(
                Segment(entry, info.st_size, now - info.st_mtime, info.st_dev, info.st_ino)
            )
    return found


def _mapped_files(maps: Path) -> set[tuple[int, int]]:
    """The (device, inode) of each file a process has mapped, from its /proc/PID/maps."""
    files = set()
    for line in maps.read_text(errors="replace").splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or fields[4] == "0":
            continue  # anonymous memory
        major, _, minor = fields[3].partition(":")
        try:
            files.add((os.makedev(int(major, 16), int(minor, 16)), int(fields[4])))
        except ValueError:
            continue
    return files


def _open_files(fd_dir: Path) -> set[tuple[int, int]]:
    """The (device, inode) of each file a process has open, from its /proc/PID/fd."""
    files = set()
    for fd in fd_dir.iterdir():
        try:
            info = os.stat(fd)  # follows the link to the open file itself
        except OSError:
            continue  # closed meanwhile
        files.add((info.st_dev, info.st_ino))
    return files


def files_in_use() -> set[tuple[int, int]]:
    """(device, inode) of every file some live process that we may inspect has open or
    mapped: a path string differs for one file seen through a bind mount, link or symlink."""
    used: set[tuple[int, int]] = set()
    for proc in _PROC.iterdir():
        if not proc.name.isdigit():
            continue
        for read, where in ((_mapped_files, proc / "maps"), (_open_files, proc / "fd")):
            try:
                used |= read(where)
            except OSError:
                continue  # the process ended, or is another user's (it cannot use ours)
    return used


def stale_segments(directory: Path, uid: int, min_age_s: float = MIN_AGE_S) -> list[Segment]:
    """``uid``'s MPICH segments in ``directory`` that no live process holds and that are
    at least ``min_age_s`` old."""
    old = [s for s in _candidates(Path(directory), uid, time.time()) if s.age_s >= min_age_s]
    if not old:
        return []
    used = files_in_use()
    return [s for s in old if (s.dev, s.ino) not in used]


def remove(segments: list[Segment]) -> list[tuple[Segment, str]]:
    """Unlink each segment; returns those that could not be removed, with the reason."""
    failures = []
    for segment in segments:
        try:
            segment.path.unlink()
        except FileNotFoundError:
            continue  # someone else cleaned it
        except OSError as exc:
            failures.append((segment, exc.strerror or str(exc)))
    return failures


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.1f} MiB"


def run_clean(cfg: CleanConfig) -> int:
    """Remove (or with --dry-run list) the stale segments; 1 if some could not be removed."""
    directory = Path(cfg.dir)
    if not directory.is_dir():
        raise UsageError(f"--dir {cfg.dir}: not a directory")
    stale = stale_segments(directory, os.getuid(), cfg.min_age)
    failures = [] if cfg.dry_run else remove(stale)
    failed = {f[0].path for f in failures}
    verb = "would remove" if cfg.dry_run else "removed"
    for segment in stale:
        if segment.path not in failed:
            print(f"{verb} {segment.path} ({_mib(segment.size)})")
    for segment, reason in failures:
        print(f"cannot remove {segment.path}: {reason}", file=sys.stderr)
    total = sum(s.size for s in stale if s.path not in failed)
    done = len(stale) - len(failures)
    print(f"# {done} stale MPICH segment{'s' * (done != 1)} in {directory}, {_mib(total)}")
    return 1 if failures else 0
