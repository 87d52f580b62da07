"""The machine's state, timed beside every round of a sweep: a fixed memory copy and a small
allreduce of the MPI library.

This machine's speed moves by up to 3x between states (and from one launch to the next);
a cluster node's moves with OS noise and neighbours. A candidate's time alone cannot tell a
slow algorithm from a slow minute; the same fixed work, timed in the same round, can: the
copy follows the memory bus and the cores' clock, the 8-byte allreduce the scheduling and
the library's per-call path. Records keep both per round, so a point measured in an
outlying state can be flagged and measured again, and a prediction can be scaled to the
state its measurement saw.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

COPY_BYTES = 1 << 20
SMALL_BYTES = 8
# Each sample is the median of a few repetitions: one preempted repetition must not make
# a normal round look outlying.
REPETITIONS = 3
# A point is outlying when its median reference exceeds the launch's typical reference by
# this factor: this machine's slow state is 2-3x; at 1.5x, 10% of a p = 4 sweep's points
# (4 ranks on 2 cores: the scheduler's jitter) were flagged and measured again, at 2x 2%.
OUTLYING_FACTOR = 2.0


class ReferenceTimer:
    """Times the reference on one communicator (collective: every rank calls ``sample``)."""

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self.src = np.ones(COPY_BYTES // 8)
        self.dst = np.empty_like(self.src)
        self.small_in = np.ones(SMALL_BYTES // 8)
        self.small_out = np.empty_like(self.small_in)

    def sample(self) -> tuple[float, float]:
        """(copy seconds, allreduce seconds) on this rank: medians of a few repetitions."""
        wtime = MPI.Wtime
        copies, reductions = [], []
        for _ in range(REPETITIONS):
            start = wtime()
            np.copyto(self.dst, self.src)
            copies.append(wtime() - start)
        for _ in range(REPETITIONS):
            self.comm.Barrier()
            start = wtime()
            self.comm.Allreduce(self.small_in, self.small_out, MPI.SUM)
            reductions.append(wtime() - start)
        return float(np.median(copies)), float(np.median(reductions))


def outlying(point_reference: np.ndarray, typical: np.ndarray) -> bool:
    """Whether a point's median reference (copy, allreduce) exceeds the typical one by
    OUTLYING_FACTOR in either part."""
    return bool(np.any(np.asarray(point_reference) > OUTLYING_FACTOR * np.asarray(typical)))
