"""A C client that times an MPI collective the way OSU Micro-Benchmarks does, so that a
selection file is proven where a C application would meet it (no Python, no mpi4py):
the package's ``c/osu_collective.c``, built with the MPI library's own ``mpicc`` at first
use (cached by source and compiler), or OMB's own ``osu_allreduce``/``osu_bcast`` where
the user points to them. Jobs start through the one job launcher (jobs.launch)."""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import launch
from osu_dl_bench.runtime.text import printable

SOURCE = "osu_collective.c"
# OSU's iteration counts are 1000 up to 8 KiB and 100 above; a fifth of them keeps each
# launch short, so that many launches can alternate with and without the file.
ITERATIONS = (200, 20)
BUILD_TIMEOUT = 120.0
OMB_NAMES = {"allreduce": "osu_allreduce", "bcast": "osu_bcast"}
# Seconds one launch of the client may take by default (every size of one collective;
# verify-export --client-timeout), and between the lines that show it still runs.
DEFAULT_TIMEOUT = 600.0
PROGRESS_EVERY = 30.0


def source_text() -> str:
    """The client's C source (package data)."""
    return resources.files("osu_dl_bench.jobs").joinpath("c", SOURCE).read_text()


def find_mpicc(mpi: str | None) -> str:
    """The library's mpicc: beside --mpi's mpiexec, beside this Python, else on PATH."""
    prefix = launch.library_prefix(mpi)
    places = [prefix / "bin"] if prefix is not None else [Path(sys.executable).parent]
    for place in places:
        found = shutil.which("mpicc", path=str(place))
        if found:
            return found
    found = shutil.which("mpicc") if prefix is None else None
    if not found:
        where = prefix / "bin" if prefix is not None else "beside this Python or on PATH"
        raise UsageError(f"the C client needs the MPI library's mpicc: none found {where}")
    return found


def build_client(mpi: str | None, cache: Path) -> Path:
    """The client's binary for this library, compiled into ``cache`` unless already there
    (built under a temporary name and renamed, so a build cut short is never reused)."""
    mpicc = find_mpicc(mpi)
    source = source_text()
    digest = hashlib.sha256(f"{mpicc}\n{launch.library_prefix(mpi)}\n{source}".encode())
    binary = cache / f"osu_collective-{digest.hexdigest()[:16]}"
    if binary.exists():
        return binary
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as work:
            src, out = Path(work) / SOURCE, Path(work) / binary.name
            src.write_text(source)
            built = launch.run([mpicc, "-O2", "-o", str(out), str(src)], timeout=BUILD_TIMEOUT)
            if built.returncode != 0:
                raise UsageError(
                    f"{mpicc} could not build the C client: {built.stderr.strip()[-400:]}"
                )
            os.replace(out, binary)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{mpicc} did not build the C client in {BUILD_TIMEOUT:g} s") from None
    except OSError as exc:
        raise UsageError(f"cannot build the C client in {cache}: {exc}") from None
    return binary


def omb_binary(omb_dir: str, collective: str) -> Path:
    """OMB's binary for a collective in the directory the user named."""
    path = Path(omb_dir) / OMB_NAMES[collective]
    if not path.is_file():
        raise UsageError(f"--omb {omb_dir}: no {OMB_NAMES[collective]} there")
    return path


def client_argv(binary: Path, collective: str, lo: int, hi: int, omb: bool) -> list[str]:
    """The client's arguments for a size range: ours, or OMB's (-m MIN:MAX -i -x)."""
    small, large = ITERATIONS
    if omb:
        # OMB applies -i to every size; the small count keeps the large sizes long enough.
        return [str(binary), "-m", f"{lo}:{hi}", "-i", str(large), "-x", str(max(large // 10, 1))]
    return [str(binary), collective, str(lo), str(hi), str(small), str(large)]


def parse_latencies(text: str, lo: int = 0, hi: int | None = None) -> dict[int, float]:
    """'BYTES MICROSECONDS...' lines (ours and OMB's, whose '#' lines are headers), sizes
    from ``lo`` to ``hi``; UsageError at a line that starts with a size but holds no
    latency a collective can take (a client printing garbage must not become a row)."""
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        size = int(parts[0]) if len(parts[0]) < 20 else -1
        try:
            latency = float(parts[1])
        except ValueError:
            latency = math.nan
        if not (lo <= size <= (hi if hi is not None else size) and 0 < latency < math.inf):
            shown = printable(line.strip())[:80]
            raise UsageError(
                f"the C client printed {shown!r}: expected a size from {lo} to {hi} bytes "
                "and its latency in microseconds (a positive number), as OSU's clients do"
            )
        found[size] = latency
    return found


@dataclass(frozen=True)
class ClientRun:
    """One launch of the client: its command, where it is in the whole (for the progress
    lines) and how long it may take."""

    argv: list[str]
    nprocs: int
    what: str  # 'launch 2/6, p=4, allreduce, with the file'
    timeout: float
    lo: int = 0
    hi: int | None = None


def run_client(
    run: ClientRun, env: Mapping[str, str], mpi: str | None, every: float = PROGRESS_EVERY
) -> dict[int, float]:
    """One launch of the client: size -> mean latency (us). A line says what starts, and
    another every ``every`` seconds while it runs; past ``run.timeout`` it is stopped
    (UsageError naming the option that sets the limit)."""
    cmd = [*launch.launcher_prefix(run.nprocs, mpi=mpi), *run.argv]
    print(f"# C client: {run.what} (up to {run.timeout:g} s)", flush=True)

    def still_running(waited: float) -> None:
        print(
            f"# C client: {run.what}: still running after {waited:.0f} s "
            f"(stopped at {run.timeout:g} s)",
            flush=True,
        )

    env = launch.mpi_environment(run.nprocs, env)
    try:
        done = launch.run(cmd, run.timeout, env, progress=launch.Progress(every, still_running))
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"the C client ({run.what}) did not finish within {run.timeout:g} s "
            "(--client-timeout); stopped"
        ) from None
    out, err = done.stdout or "", done.stderr or ""
    if done.returncode != 0:
        tail = printable((err or out or "").strip()[-600:])
        raise UsageError(f"the C client failed (exit {done.returncode}): {tail}")
    found = parse_latencies(out, run.lo, run.hi)
    if not found:
        shown = printable(out.strip()[-200:])
        raise UsageError(f"the C client ({run.what}) printed no latency: {shown!r}")
    return found
