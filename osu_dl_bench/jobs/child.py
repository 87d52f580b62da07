"""``python -m osu_dl_bench.jobs.child SPEC``: a job the sweep launched (or its planner),
doing what its spec (jobs.job_spec) says. The spec is read on every rank before MPI
starts, so a spec this version cannot run is one message from rank 0 and exit 2 on every
rank (runtime.guard), never a hang; MPI then starts at the spec's thread level.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.job_spec import CHILD_MODULE, MEASURE, PLAN, read_spec
from osu_dl_bench.measurement import heartbeat
from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.start import init_mpi, set_command

USAGE = f"usage: python -m {CHILD_MODULE} SPEC (a job spec written by osu-dl-bench sweep)"


def main(argv: Sequence[str]) -> int:
    """Run the job of the spec file ``argv[0]``; returns the exit code."""

    def body() -> int:
        set_command("sweep job")  # compared across ranks at start-up
        if len(argv) != 1:
            raise UsageError(USAGE)
        spec = read_spec(argv[0])
        if spec.role not in (PLAN, MEASURE):
            raise UsageError(f"job spec {argv[0]}: role {spec.role!r} is no launched job's")
        if spec.role == MEASURE:
            heartbeat.start_for_this_rank()
        mpi = init_mpi(spec.measure.thread_level)
        from osu_dl_bench.jobs.worker import run_spec  # imports mpi4py.MPI: after init_mpi

        return run_spec(mpi.COMM_WORLD, spec)

    code = run_guarded(body)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
