"""Measuring one sweep point: every candidate validated once, then timed in interleaved
rounds (A B C, B C A, C A B, ...). Returns raw numbers; never prints or writes.

Why rounds: this machine's speed alternates by up to 3x between two states, so timing one
algorithm in a block and then another would rank them by the state they happened to
meet. Interleaved rounds expose every candidate to the same states, and the median over
rounds ignores the minority state.

Each iteration is timed as in OSU (an untimed barrier, then the timer wraps only the
call); the per-iteration maximum across ranks is the collective's latency (open-mpi/ompi
#11022), and a round's time is the mean of those maxima (see store.SweepPoint).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from collectives import Buffers, CallShape, CollectiveSpec
from collectives.dtypes import ElementType
from collectives.ops import ReduceOp
from collectives.registry import CollectiveCall
from osu_dl_bench.measurement.harness import FAULT_ENV, count_wrong
from osu_dl_bench.measurement.schedule import (
    CALIBRATION_SHARE,
    MAX_ROUNDS,
    Schedule,
    another_round,
    iterations_for,
    next_calibration_count,
    rotation,
)

# Rooted collectives are swept with root 0, bench's default (-k fixed:0).
ROOT = 0


@dataclass(frozen=True)
class PointInputs:
    """The buffers every candidate of a point shares, their pristine copy and the expected
    output: filled and computed once per point, whatever the number of candidates."""

    spec: CollectiveSpec
    shape: CallShape
    etype: ElementType
    op: ReduceOp | None
    bufs: Buffers
    pristine: Buffers
    expected: np.ndarray

    def reset(self) -> None:
        """Restore the inputs (and zero the outputs) before a checked call."""
        for dst, src in (
            (self.bufs.send, self.pristine.send),
            (self.bufs.recv, self.pristine.recv),
        ):
            if dst is not None:
                dst[...] = src

    def call(self, call: CollectiveCall) -> None:
        """One call of a candidate on the shared buffers."""
        call(self.bufs.send, self.bufs.recv, self.op, ROOT)


def prepare_inputs(
    comm: MPI.Comm, spec: CollectiveSpec, etype: ElementType, op: ReduceOp | None, xp: Any, n: int
) -> PointInputs:
    """Allocate and fill this rank's buffers for n elements (shared by all candidates:
    same pages for everyone, and memory that does not grow with the candidates)."""
    shape = CallShape(n, comm.Get_size(), comm.Get_rank(), ROOT, in_place=False)
    bufs = spec.allocate(xp, etype.dtype, shape)
    spec.fill(bufs, shape, op)
    pristine = Buffers(
        None if bufs.send is None else bufs.send.copy(),
        None if bufs.recv is None else bufs.recv.copy(),
    )
    expected = spec.expected(shape, etype.dtype, op)
    return PointInputs(spec, shape, etype, op, bufs, pristine, expected)


def validate(comm: MPI.Comm, calls: Sequence[CollectiveCall], inputs: PointInputs) -> list[int]:
    """Each candidate once on fresh inputs: wrong elements, summed over ranks. The call
    also warms the candidate up (first-touch pages, lazily built scratch), which is why
    its time is no guide to the schedule."""
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    wrong = np.zeros(len(calls), dtype=np.int64)
    for j, call in enumerate(calls):
        inputs.reset()
        comm.Barrier()
        inputs.call(call)
        output = inputs.spec.output(inputs.bufs, inputs.shape)
        if output is None:
            continue
        # The bench harness's test hook, so tests can prove a failure is recorded.
        if os.environ.get(FAULT_ENV) == "corrupt" and rank == nprocs - 1 and len(output):
            output[-1] = output[-1] + 1
        wrong[j] = count_wrong(output, inputs.expected, inputs.etype)
    comm.Allreduce(MPI.IN_PLACE, wrong, MPI.SUM)
    return [int(w) for w in wrong]


def _pass_seconds(
    comm: MPI.Comm, calls: Sequence[CollectiveCall], inputs: PointInputs, count: int
) -> float:
    """Wall time of ``count`` iterations of every candidate, the slowest rank's."""
    barrier = comm.Barrier
    barrier()
    start = MPI.Wtime()
    for call in calls:
        for _ in range(count):
            barrier()
            inputs.call(call)
    elapsed = np.array([MPI.Wtime() - start])
    comm.Allreduce(MPI.IN_PLACE, elapsed, MPI.MAX)
    return float(elapsed[0])


def calibrate(
    comm: MPI.Comm, calls: Sequence[CollectiveCall], inputs: PointInputs, budget: float
) -> int:
    """Iterations per round: time growing passes until one takes a share of the budget;
    every rank reaches the same count (times are maxima across ranks)."""
    target = CALIBRATION_SHARE * budget
    count = 1
    while True:
        seconds = _pass_seconds(comm, calls, inputs, count)
        following = next_calibration_count(count, seconds, target)
        if following is None:
            return iterations_for(seconds / count, budget)
        count = following


def _run_round(
    comm: MPI.Comm, calls: Sequence[CollectiveCall], inputs: PointInputs, times: np.ndarray, r: int
) -> None:
    """The hot loop: round r, every candidate ``iterations`` times, in rotated order."""
    barrier, wtime = comm.Barrier, MPI.Wtime
    send, recv, op = inputs.bufs.send, inputs.bufs.recv, inputs.op
    for j in rotation(r, len(calls)):
        call, row = calls[j], times[r, j]
        for i in range(len(row)):
            barrier()
            start = wtime()
            call(send, recv, op, ROOT)
            row[i] = wtime() - start


def timed_rounds(
    comm: MPI.Comm,
    calls: Sequence[CollectiveCall],
    inputs: PointInputs,
    iterations: int,
    budget: float,
) -> np.ndarray:
    """times[round, candidate, iteration] in seconds, the maximum across ranks. Rounds go
    on while the budget lasts (schedule.another_round); rank 0's clock decides, so every
    rank stops after the same round."""
    times = np.zeros((MAX_ROUNDS, len(calls), iterations))
    more = np.ones(1, dtype=np.int8)
    start, rounds = MPI.Wtime(), 0
    while more[0]:
        _run_round(comm, calls, inputs, times, rounds)
        rounds += 1
        more[0] = another_round(rounds, MPI.Wtime() - start, budget)
        comm.Bcast(more, root=0)
    times = np.ascontiguousarray(times[:rounds])
    # One reduction after the point, so the timed loop has no extra traffic.
    comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)
    return times


@dataclass(frozen=True)
class PointTiming:
    """What one point's measurement produced, before it becomes records."""

    wrong: list[int]
    schedule: Schedule  # as run
    times: np.ndarray  # (rounds, candidates, iterations), seconds, max across ranks


def measure_point(
    comm: MPI.Comm, calls: Sequence[CollectiveCall], inputs: PointInputs, budget: float
) -> PointTiming:
    """Validate, calibrate and time the candidates of one point."""
    wrong = validate(comm, calls, inputs)
    iterations = calibrate(comm, calls, inputs, budget)
    times = timed_rounds(comm, calls, inputs, iterations, budget)
    return PointTiming(wrong, Schedule(len(times), iterations), times)
