"""One training step's gradient traffic, replayed (``bench allreduce --buckets MODEL``):
the buckets' allreduces back to back in the order DDP issues them, a step timed as one
call. Returns raw numbers; never prints or writes.

Built from the kernel's pieces: every bucket has its own buffers (``prepare_inputs``:
DDP reduces each bucket in its own gradient buffer, so a step touches as much memory as
training does); a step of one candidate is a composite call that runs the candidate on
every bucket, timed by the kernel's hot loop (``timed_round``: an untimed barrier between
steps, the candidates interleaved step by step, as bench interleaves them within a
size); statistics are OSU mode's (``osu_stats``: avg/min/max across ranks of each rank's
mean step, P50/P99 of each step's slowest rank); ``-c`` checks each candidate on every
bucket (``validate``) after the timed steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from collectives import Buffers, CollectiveSpec
from collectives.dtypes import ElementType
from collectives.ops import ReduceOp
from collectives.registry import CollectiveCall
from osu_dl_bench.measurement.bench_config import BenchConfig
from osu_dl_bench.measurement.kernel import (
    Inputs,
    OsuStats,
    osu_stats,
    prepare_inputs,
    timed_round,
    validate,
)

# A step of ResNet-50 moves ~100 MB per rank: fewer steps than OSU's 100 large messages
# keep a three-candidate replay within seconds to a minute; -i and -x override.
DEFAULT_STEPS = 50
DEFAULT_WARMUP_STEPS = 5


@dataclass(frozen=True)
class ReplayTiming:
    """Per candidate: its step statistics, and its wrong elements over every bucket
    (summed over ranks; None when not checked)."""

    stats: list[OsuStats]
    wrong: list[int] | None


def steps_for(cfg: BenchConfig) -> tuple[int, int]:
    """(timed steps, warm-up steps): -i and -x, else the replay's defaults."""
    steps = cfg.iterations if cfg.iterations is not None else DEFAULT_STEPS
    warmup = cfg.warmup if cfg.warmup is not None else DEFAULT_WARMUP_STEPS
    return steps, warmup


def prepare_buckets(
    comm: MPI.Comm,
    spec: CollectiveSpec,
    etype: ElementType,
    op: ReduceOp | None,
    xp: object,
    counts: Sequence[int],
    in_place: bool = False,
    checked: bool = True,
) -> list[Inputs]:
    """One set of filled buffers per bucket of ``counts`` elements, in the step's order."""
    return [prepare_inputs(comm, spec, etype, op, xp, n, 0, in_place, checked) for n in counts]


def step_call(call: CollectiveCall, buckets: Sequence[Inputs]) -> CollectiveCall:
    """A call that runs ``call`` on every bucket's buffers in order (one step); it ignores
    the buffers it is handed, so the kernel can time it like one collective."""
    pairs = [(b.bufs.send, b.bufs.recv, b.op) for b in buckets]

    def step(_send: object, _recv: object, _op: ReduceOp | None, root: int) -> None:
        for send, recv, op in pairs:
            call(send, recv, op, root)

    return step


def _steps(comm: MPI.Comm, steps: Sequence[CollectiveCall], last: Inputs, count: int) -> np.ndarray:
    """times[candidate, step], the candidates interleaved step by step."""
    times = np.zeros((len(steps), count))
    # The last bucket's buffers stand for the step's: on GPU buffers the kernel's clock
    # waits for the device after each call, which covers every bucket's kernels.
    bufs = Buffers(last.bufs.send, last.bufs.recv)
    order = range(len(steps))
    timed_round(comm.Barrier, steps, order, bufs, last.op, [0] * count, times, interleaved=True)
    return times


def measure_replay(
    comm: MPI.Comm,
    calls: Sequence[CollectiveCall],
    buckets: Sequence[Inputs],
    steps: int,
    warmup: int,
    checked: bool,
) -> ReplayTiming:
    """Time ``steps`` steps of every candidate after ``warmup`` untimed ones; then, when
    ``checked``, check each candidate once on every bucket."""
    if not buckets:
        raise ValueError("a replay needs at least one bucket, got none")
    composites = [step_call(call, buckets) for call in calls]
    _steps(comm, composites, buckets[-1], warmup)
    times = _steps(comm, composites, buckets[-1], steps)
    stats = [osu_stats(comm, row) for row in times]
    if not checked:
        return ReplayTiming(stats, None)
    wrong = np.zeros(len(calls), dtype=np.int64)
    for inputs in buckets:
        wrong += validate(comm, calls, inputs)
    return ReplayTiming(stats, [int(w) for w in wrong])
