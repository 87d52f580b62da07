"""The entry of a program that runs inside an MPI job (the model's calibration job, the
scripts' workers): MPI started at a thread level, then the body under runtime.guard.run_guarded,
so an error is one message and one exit code on every rank, never a hung job. The
``osu-dl-bench`` command does the same in cli.main, where each subcommand picks its level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.start import DEFAULT_THREAD_LEVEL, init_mpi


def run_in_job(body: Callable[[Any], int], thread_level: str = DEFAULT_THREAD_LEVEL) -> int:
    """Start MPI at ``thread_level``, run ``body(COMM_WORLD)`` under run_guarded and return
    the exit code: a usage error is rank 0's message and 2 on every rank, a wrong result
    1, an unexpected error that rank's traceback and MPI_Abort."""
    return run_guarded(lambda: body(init_mpi(thread_level).COMM_WORLD))
