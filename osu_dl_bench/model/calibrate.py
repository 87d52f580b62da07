"""The standalone calibration job, for runs whose sweep did not calibrate in its launches.

    mpiexec -n P python -m osu_dl_bench.commands.calibration_job RUN_DIR [-m 8:64M]
        [--rounds 10] [--append]

The kernels, the files they write (RUN_DIR/calibration.csv and calibration.json) and their
kinds are measurement.calibration's, which the sweep also runs once in every launch of its
"mpi" group; this job measures every doubling size of ``-m`` with more rounds. ``--append``
adds a job to an earlier calibration (the fit takes, per process count, kind and size, the
median over jobs). One job per process count of the sweep to be predicted: each measures
the contention state of p ranks on the node (on a 2-core node 3 or 4 ranks time-share the
cores, and what a message costs then is set by the scheduler, not by the memory bus).
"""

from __future__ import annotations

from pathlib import Path

from osu_dl_bench.measurement.calibration import (
    CALIBRATION_CSV,
    CALIBRATION_JSON,
    KINDS,
    REFERENCE_KINDS,
    Effort,
    measure,
    metadata,
    write_calibration,
)
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.runtime.agreement import on_rank0

__all__ = ["CALIBRATION_CSV", "CALIBRATION_JSON", "KINDS", "REFERENCE_KINDS", "calibrate"]


def calibrate(comm, run_dir: str, message_size: str, rounds: int, append: bool) -> int:
    """Measure this job's ranks at every doubling size of ``message_size`` ('MIN:MAX') and
    write (rank 0) the calibration into ``run_dir``, or add it to the earlier ones."""
    from collectives.units import doubling_sizes
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.measurement.options import parse_size_range
    from osu_dl_bench.measurement.reference import ReferenceTimer

    sizes = doubling_sizes(*parse_size_range(message_size, 8))
    if comm.Get_size() < 2:
        raise UsageError(f"the calibration job needs at least 2 ranks, got {comm.Get_size()}")
    meta = metadata(comm)
    # One node measures the intra-node link, one rank per node the inter-node one; a mix
    # would blend the two in one fit.
    if len(meta["hosts"]) not in (1, comm.Get_size()):
        raise UsageError(
            "the calibration job measures one node or one rank per node, got "
            f"{comm.Get_size()} ranks on hosts {meta['hosts']}"
        )
    rows = measure(comm, sizes, Effort(rounds=max(1, rounds)), ReferenceTimer(comm))
    on_rank0(comm, lambda: write_locked(Path(run_dir), rows, meta, append))
    return 0


def write_locked(run_dir: Path, rows: list[dict], meta: dict, append: bool) -> None:
    """Write the calibration holding the run directory's lock, as a sweep does: a sweep
    writing its own launches' calibration there makes this job refuse, not interleave."""
    with RunStore(run_dir).lock():
        write_calibration(run_dir, rows, meta, append)
