"""What a result records of its run to be reproduced and compared: the MPI library and
versions, hosts, thread level, Slurm job, time, and the command line that ran it."""

from __future__ import annotations

import datetime as _dt
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from osu_dl_bench import __version__
from osu_dl_bench.runtime.launcher import OVERSUBSCRIBED_CVARS
from osu_dl_bench.runtime.slurm_env import slurm_job
from osu_dl_bench.runtime.start import thread_level_name
from osu_dl_bench.runtime.text import is_control
from osu_dl_bench.runtime.topology import Topology


def utc_now() -> str:
    """The current UTC time to the second (ISO 8601), as every record and file dates."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# The key under which every record, metadata file and provenance block keeps the command
# line (a run directory written before command_line existed holds " ".join(sys.argv) there:
# the same key, read as text).
COMMAND_KEY = "command"


# The arguments of the running cli.main(ARGS) when a Python caller (a test) passed them:
# sys.argv is then the caller's command line, not this command's.
_cli_arguments: list[str] | None = None


def set_cli_arguments(arguments: Sequence[str] | None) -> None:
    """The arguments cli.main runs with (None: those of sys.argv, and after it returns)."""
    global _cli_arguments
    _cli_arguments = None if arguments is None else list(arguments)


def command_line(argv: Sequence[str] | None = None) -> str:
    """This command's line (``argv``; default: sys.argv, or the arguments the running
    cli.main was given), quoted so it can be pasted back into a shell."""
    if argv is None:
        argv = sys.argv if _cli_arguments is None else ["osu-dl-bench", *_cli_arguments]
    argv = list(argv)
    return shlex.join([*_program(argv[0] if argv else ""), *argv[1:]])


# The package's folder: a module of it run as a job is named `python -m MODULE`.
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _program(script: str) -> list[str]:
    """The words that name the program: the console script for osu-dl-bench itself (argv[0]
    is __main__.py under `python -m osu_dl_bench`), `python -m MODULE` for a module of the
    package run as a job (argv[0] is its path then), a script's path as given."""
    path = Path(script)
    if path.suffix != ".py" or path.name == "__main__.py":
        return ["osu-dl-bench"]
    try:
        inside = path.resolve().relative_to(_PACKAGE_DIR)
    except ValueError:
        return [script]
    return ["python", "-m", ".".join((_PACKAGE_DIR.name, *inside.with_suffix("").parts))]


@dataclass(frozen=True)
class RunMetadata:
    """What a result needs to be reproduced and compared: library, versions, hosts, time."""

    mpi_library: str
    mpi_version: str
    mpi4py_version: str
    thread_level: str
    hostnames: str
    package_version: str
    timestamp: str
    command: str
    # MPICH shared-memory settings in force (set for oversubscribed runs).
    mpich_posix_cvars: str
    # The Slurm job the run belongs to ("" outside Slurm), so results can be traced to it.
    slurm_job_id: str = ""
    slurm_nodes: str = ""
    slurm_ntasks_per_node: str = ""
    # On GPU buffers: the GPU, its driver, CUDA and NCCL, and MPI direct or staged
    # (collectives.device.gpu_facts); empty on the host, whose records carry none of it.
    device_facts: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, str]:
        """Plain dict, for records and metadata files (the device's facts as fields)."""
        fields = asdict(self)
        return {**fields, **fields.pop("device_facts")}


def collect_metadata(topology: Topology, device: str = "cpu") -> RunMetadata:
    """Metadata of the current run (same on every rank); on ``device`` cuda also the GPU's
    facts."""
    import mpi4py
    from mpi4py import MPI

    from collectives.device import gpu_facts

    major, minor = MPI.Get_version()
    slurm = slurm_job()
    return RunMetadata(
        mpi_library=library_version_line(MPI),
        mpi_version=f"{major}.{minor}",
        mpi4py_version=mpi4py.__version__,
        thread_level=thread_level_name(MPI.Query_thread()),
        hostnames=",".join(topology.hostnames),
        package_version=__version__,
        timestamp=utc_now(),
        command=command_line(),
        mpich_posix_cvars=",".join(
            f"{k}={os.environ[k]}" for k in OVERSUBSCRIBED_CVARS if k in os.environ
        ),
        slurm_job_id=slurm.job_id if slurm else "",
        slurm_nodes=str(slurm.nodes) if slurm else "",
        slurm_ntasks_per_node=str(slurm.ntasks_per_node) if slurm else "",
        device_facts=gpu_facts() if device == "cuda" else {},
    )


def library_version_line(mpi) -> str:
    """The first line of MPI_Get_library_version, controls as spaces: Open MPI's text
    carries its C string's NUL (dropped), which ended up inside written files."""
    lines = mpi.Get_library_version().replace("\0", "").strip().splitlines() or [""]
    return "".join(" " if is_control(ch) else ch for ch in lines[0]).strip()
