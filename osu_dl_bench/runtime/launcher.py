"""What the launcher (mpiexec, srun) announced in the environment, read before MPI is
initialised: the job's size, this process's rank, the ranks on this host; and the MPICH
settings an oversubscribed host needs, which must be in place before MPI starts."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from osu_dl_bench.runtime.slurm_env import slurm_local_count

# MPICH's shared-memory collectives busy-poll: with more ranks than cores one call can
# take a second. Their "mpir" fallback does not (measured on the reference machine).
OVERSUBSCRIBED_CVARS = {
    "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM": "mpir",
    "MPIR_CVAR_BCAST_POSIX_INTRA_ALGORITHM": "mpir",
    "MPIR_CVAR_REDUCE_POSIX_INTRA_ALGORITHM": "mpir",
    "MPIR_CVAR_BARRIER_POSIX_INTRA_ALGORITHM": "mpir",
}
# A Slurm step announces its own layout (SLURM_STEP_TASKS_PER_NODE, e.g. "2(x3)"); the
# job's SLURM_NTASKS_PER_NODE can be larger than a step started with fewer tasks.
_LOCAL_SIZE_VARS = (
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
)
# Rank variables set by the launchers we know, read before MPI is initialised.
_LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def local_rank_count() -> int | None:
    """Ranks on this host as the launcher announced it, before MPI is initialised."""
    for var in _LOCAL_SIZE_VARS:
        value = os.environ.get(var, "")
        count = slurm_local_count(value) if var.startswith("SLURM_") else None
        if count is None and value.isdigit():
            count = int(value)
        if count is not None:
            return count
    return None


def avoid_busy_polling_when_oversubscribed() -> bool:
    """Set OVERSUBSCRIBED_CVARS (unless the user set them) when ranks outnumber cores."""
    local = local_rank_count()
    if local is None or local <= (os.cpu_count() or 1):
        return False
    for name, value in OVERSUBSCRIBED_CVARS.items():
        os.environ.setdefault(name, value)
    return True


def posix_pinned(ranks_on_host: int) -> bool:
    """Whether MPICH's POSIX layer is pinned to MPIR for a job with ``ranks_on_host`` ranks
    on a host: by avoid_busy_polling_when_oversubscribed, or by the user's own setting."""
    if ranks_on_host > (os.cpu_count() or 1):
        return True
    return any(os.environ.get(name) == value for name, value in OVERSUBSCRIBED_CVARS.items())


def launcher_size() -> int:
    """Ranks in the job as the launcher (mpiexec, srun) announced them, before MPI is
    initialised; 1 outside a launch (a batch script's own SLURM_NTASKS does not count)."""
    names = ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE"]
    if "PMIX_RANK" in os.environ:  # srun --mpi=pmix sets no PMI_SIZE
        names.append("SLURM_STEP_NUM_TASKS")
    return _first_whole_number(names, 1)


def launcher_rank() -> int:
    """This process's rank as the launcher (mpiexec, srun) announced it; 0 if none did."""
    return _first_whole_number(_LAUNCHER_RANK_VARS, 0)


def _first_whole_number(names: Sequence[str], default: int) -> int:
    """The first of the environment variables ``names`` that holds a whole number."""
    for var in names:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return default


def world_rank() -> int:
    """This process's rank in COMM_WORLD, without initialising MPI as a side effect."""
    if "mpi4py.MPI" not in sys.modules:
        return launcher_rank()
    from mpi4py import MPI

    if MPI.Is_initialized() and not MPI.Is_finalized():
        return MPI.COMM_WORLD.Get_rank()
    return launcher_rank()
