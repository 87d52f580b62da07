"""An error met by some ranks only, after MPI started: run as
``python uneven_errors.py MODE`` under mpiexec (MODE: one-rank, every-rank, or
count-mismatch: every rank's collective refuses its arguments; truncated: MPI's own bcast
given different counts)."""

import sys

from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime import guard
from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.start import init_mpi

guard.SETTLE_SECONDS = 3.0  # keep the test short; ranks of one error meet in ms


def body() -> int:
    comm = init_mpi("single").COMM_WORLD
    rank = comm.Get_rank()
    if sys.argv[1] == "truncated":
        import numpy as np

        comm.Bcast(np.zeros(8 if rank == 0 else 16, np.float32), root=1)
        return 0
    if sys.argv[1] == "count-mismatch":
        from collectives.errors import CountMismatch

        raise CountMismatch("allreduce (cma): rank 1 passed 4096 bytes, rank 0 passed 8192")
    if sys.argv[1] == "every-rank" or rank == 1:
        raise UsageError(f"bad input seen on rank {rank if sys.argv[1] == 'one-rank' else 'any'}")
    comm.Barrier()  # where the others wait for rank 1 forever unless the job is aborted
    return 0


if __name__ == "__main__":
    sys.exit(run_guarded(body))
