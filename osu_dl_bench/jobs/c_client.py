"""A C client that times an MPI collective the way OSU Micro-Benchmarks does, so that a
selection file is proven where a C application would meet it (no Python, no mpi4py):
the package's ``c/osu_collective.c``, built with the MPI library's own ``mpicc`` at first
use (cached by source and compiler), or OMB's own ``osu_allreduce``/``osu_bcast`` where
the user points to them. Jobs start through the one job launcher (jobs.launch)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import launch

SOURCE = "osu_collective.c"
# OSU's iteration counts are 1000 up to 8 KiB and 100 above; a fifth of them keeps each
# launch short, so that many launches can alternate with and without the file.
ITERATIONS = (200, 20)
BUILD_TIMEOUT = 120.0
OMB_NAMES = {"allreduce": "osu_allreduce", "bcast": "osu_bcast"}


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


def parse_latencies(text: str) -> dict[int, float]:
    """'BYTES MICROSECONDS...' lines (ours and OMB's, whose '#' lines are headers)."""
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit():
            try:
                found[int(parts[0])] = float(parts[1])
            except ValueError:
                continue
    return found


def run_client(
    argv: list[str],
    nprocs: int,
    env: Mapping[str, str],
    mpi: str | None,
    timeout: float,
) -> dict[int, float]:
    """One launch of the client on ``nprocs`` ranks: size -> mean latency (us)."""
    cmd = [*launch.launcher_prefix(nprocs, mpi=mpi), *argv]
    try:
        done = launch.run(cmd, timeout, env=launch.mpi_environment(nprocs, env))
    except subprocess.TimeoutExpired:
        raise UsageError(f"the C client did not finish within {timeout:g} s: {cmd}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip()[-600:]
        raise UsageError(f"the C client failed (exit {done.returncode}): {tail}")
    return parse_latencies(done.stdout)
