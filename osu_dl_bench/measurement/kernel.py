"""The one measuring kernel: how bench and sweep prepare a collective's inputs, bind its
candidates, check their output, reset their buffers and time them. Returns raw numbers;
never prints or writes.

Every call is timed as in OSU (c/mpi/collective/blocking/osu_allreduce.c): an untimed
barrier, then the timer wraps only the call (``timed_round``). Two modes use that loop:

- OSU mode (``measure_osu``, bench): fixed warm-up and timed iterations, the candidates
  interleaved within every iteration (A B C A B C ...) so a change in machine speed hits
  them alike. OSU's statistics: each rank averages its own iteration times, and
  min/avg/max are taken across ranks of those means; we also keep every iteration's
  maximum across ranks, the honest latency of a collective (open-mpi/ompi #11022), and
  report its P50 and P99.
- Time-budget mode (``measure_budget``, sweep): each candidate checked once (which also
  warms it up), growing passes fixing the iterations per round, then timed rounds in
  rotated order (A B C, B C A, C A B, ...) until the budget is spent. This machine's speed
  alternates by up to 3x between two states: rounds expose every candidate to the same
  states, and the median over rounds ignores the minority state. A round's time is the
  mean of its iterations' maxima across ranks (see store.SweepPoint). Each round also
  times a fixed reference (measurement.reference): the machine's state in that round.

All candidates of a point share one set of buffers (the same pages for everyone, and
memory that does not grow with the candidates); a check restores the inputs first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from collectives import Buffers, CallContext, CallShape, CollectiveSpec, Variant
from collectives.buffers import to_host
from collectives.device import device_ready, select_local_gpu, settle_for
from collectives.dtypes import ElementType
from collectives.ops import ReduceOp
from collectives.registry import BoundCalls, CollectiveCall, for_device
from collectives.specs import INPUT_CHUNK
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement import heartbeat
from osu_dl_bench.measurement.ranks import ClockSync, rank_summaries
from osu_dl_bench.measurement.reference import ReferenceTimer
from osu_dl_bench.measurement.schedule import (
    ITERATION_SHARE,
    MAX_ROUNDS,
    Schedule,
    another_round,
    iterations_for,
    next_iteration_count,
    rotation,
)

# Test-only hook: "corrupt" changes one element of the last rank's result, to prove a
# wrong result is reported; "raise" raises on the last rank (bench), to prove one rank's
# error aborts the job.
FAULT_ENV = "OSU_DL_BENCH_INJECT_FAULT"
# Test-only hook: "RANK:SECONDS" makes that rank sleep between the barrier and each timed
# call, to prove a late rank is named with its delay (measurement.ranks, triage).
DELAY_ENV = "OSU_DL_BENCH_DELAY_RANK"
# The hook's sleeps in all, per process: a delay meant for a few calls must not stretch a
# run of thousands of calls (1:9.99 with bench -i 5 -x 1 slept for minutes).
MAX_DELAY_TOTAL = 5.0


class _DelayBudget:
    """The seconds the DELAY_ENV hook may still sleep in this process."""

    left = MAX_DELAY_TOTAL

    @classmethod
    def sleep(cls, seconds: float) -> None:
        """Sleep ``seconds``, or what is left of the budget if that is less."""
        spent = min(seconds, cls.left)
        if spent > 0:
            cls.left -= spent
            time.sleep(spent)


@dataclass(frozen=True)
class Plan:
    """The variants that will run and the ones skipped, with the reason."""

    eligible: list[Variant]
    skipped: list[tuple[Variant, str]]


def plan_variants(variants: list[Variant], ctx: CallContext) -> Plan:
    """Split variants into eligible ones and skipped ones with their reasons."""
    eligible, skipped = [], []
    for variant in variants:
        reason = variant.ineligible_reason(ctx)
        if reason is None:
            eligible.append(variant)
        else:
            skipped.append((variant, reason))
    return Plan(eligible, skipped)


@dataclass(frozen=True)
class Inputs:
    """This rank's buffers for one point, shared by every candidate, and their pristine
    copy (None when the point is not checked: no copy of a large buffer for nothing)."""

    spec: CollectiveSpec
    shape: CallShape
    etype: ElementType
    op: ReduceOp | None
    xp: Any
    bufs: Buffers
    pristine: Buffers | None

    def reset(self) -> None:
        """Restore the inputs and zero the outputs, as freshly allocated and filled (a copy:
        many times faster than filling again)."""
        if self.pristine is None:
            raise ValueError("inputs prepared with checked=False cannot be reset")
        for dst, src in (
            (self.bufs.send, self.pristine.send),
            (self.bufs.recv, self.pristine.recv),
        ):
            if dst is not None:
                dst[...] = src
        # A copy kernel on cupy: finished before MPI reads or overwrites the buffers.
        device_ready(self.bufs.send, self.bufs.recv)

    def at_root(self, root: int) -> Inputs:
        """The same point laid out for another root (fresh buffers)."""
        if root == self.shape.root:
            return self
        shape = CallShape(
            self.shape.n, self.shape.nprocs, self.shape.rank, root, self.shape.in_place
        )
        return _filled(self.spec, shape, self.etype, self.op, self.xp, checked=True)

    def expected(self) -> np.ndarray:
        """The output this rank should hold after one call."""
        return self.spec.expected(self.shape, self.etype.dtype, self.op)


def device_calls(
    comm: MPI.Comm, binder: BoundCalls, variants: Sequence[Variant], device: str
) -> list[CollectiveCall]:
    """``variants`` bound on ``comm`` for ``device`` buffers: on cuda after this rank's GPU
    is chosen (collective over ``comm`` the first time), each staged through host memory
    where MPI is not CUDA-aware, copying what its collective reads and writes on this rank
    (collectives.registry.for_device)."""
    if device == "cuda":
        select_local_gpu(comm)
    calls, rank = binder.calls(comm, variants), comm.Get_rank()
    return [
        for_device(call, v.algorithm, device, rank) for call, v in zip(calls, variants, strict=True)
    ]


def _copy(buf: Any) -> Any:
    return None if buf is None else buf.copy()


def _filled(
    spec: CollectiveSpec,
    shape: CallShape,
    etype: ElementType,
    op: ReduceOp | None,
    xp: Any,
    checked: bool,
) -> Inputs:
    bufs = spec.allocate(xp, etype.dtype, shape)
    spec.fill(bufs, shape, op)
    pristine = Buffers(_copy(bufs.send), _copy(bufs.recv)) if checked else None
    # On cupy the copies read bufs in a kernel that MPI must not overwrite under it.
    device_ready(bufs.send, bufs.recv)
    return Inputs(spec, shape, etype, op, xp, bufs, pristine)


def prepare_inputs(
    comm: MPI.Comm,
    spec: CollectiveSpec,
    etype: ElementType,
    op: ReduceOp | None,
    xp: Any,
    n: int,
    root: int = 0,
    in_place: bool = False,
    checked: bool = True,
) -> Inputs:
    """Allocate and fill this rank's buffers for n elements (``checked``: keep a pristine
    copy, so that ``validate`` can restore them)."""
    shape = CallShape(n, comm.Get_size(), comm.Get_rank(), root, in_place)
    return _filled(spec, shape, etype, op, xp, checked)


def count_wrong(actual: Any, expected: np.ndarray, etype: ElementType) -> int:
    """Elements of ``actual`` that differ from ``expected`` beyond the dtype's tolerance
    (compared a chunk at a time: float64 copies of a whole large message would take
    several times its memory)."""
    got = to_host(actual)
    if etype.is_integer:
        return int(np.count_nonzero(got != expected))
    wrong = 0
    for lo in range(0, len(expected), INPUT_CHUNK):
        got64 = got[lo : lo + INPUT_CHUNK].astype(np.float64)
        want64 = expected[lo : lo + INPUT_CHUNK].astype(np.float64)
        wrong += int(np.count_nonzero(np.abs(got64 - want64) > etype.rtol * np.abs(want64)))
    return wrong


def validate(comm: MPI.Comm, calls: Sequence[CollectiveCall], inputs: Inputs) -> list[int]:
    """Each candidate once on restored inputs: wrong elements, summed over ranks."""
    rank, nprocs, shape = comm.Get_rank(), comm.Get_size(), inputs.shape
    expected = inputs.expected()
    wrong = np.zeros(len(calls), dtype=np.int64)
    heartbeat.current().phase("check")
    marks, at = heartbeat.current().step(range(len(calls)), 1, interleaved=False)
    for j, call in enumerate(calls):
        inputs.reset()
        marks[0] = at = at + 1  # heartbeat: this call entered
        comm.Barrier()
        call(inputs.bufs.send, inputs.bufs.recv, inputs.op, shape.root)
        marks[1] = at  # heartbeat: this call completed
        output = inputs.spec.output(inputs.bufs, shape)
        if output is None:
            continue
        if os.environ.get(FAULT_ENV) == "corrupt" and rank == nprocs - 1 and len(output):
            output[-1] = output[-1] + 1
        wrong[j] = count_wrong(output, expected, inputs.etype)
    comm.Allreduce(MPI.IN_PLACE, wrong, MPI.SUM)
    return [int(w) for w in wrong]


def validate_at_roots(
    comm: MPI.Comm, calls: Sequence[CollectiveCall], inputs: Inputs, roots: Sequence[int]
) -> list[int]:
    """``validate`` once per root, wrong elements summed over roots."""
    wrong = [0] * len(calls)
    for root in roots:
        per_root = validate(comm, calls, inputs.at_root(root))
        wrong = [a + b for a, b in zip(wrong, per_root, strict=True)]
    return wrong


def delay_for(comm: MPI.Comm) -> float:
    """Seconds this rank sleeps before each timed call under the test hook DELAY_ENV
    ("RANK:SECONDS"), else 0; a UsageError for a value that names no rank of ``comm`` or
    no delay (check it once with runtime.rank_agreement.agree_on_errors: every rank reads
    the same)."""
    value = os.environ.get(DELAY_ENV)
    if not value:
        return 0.0
    expected = f"{DELAY_ENV}={value!r}: expected RANK:SECONDS with 0 <= RANK < "
    expected += f"{comm.Get_size()} and 0 <= SECONDS <= {MAX_DELAY_TOTAL:g} (slept at most "
    expected += f"{MAX_DELAY_TOTAL:g} s in all), e.g. 1:0.005"
    try:
        target, seconds = value.split(":")
        delay, target_rank = float(seconds), int(target)
    except ValueError:
        raise UsageError(expected) from None
    if not (0 <= delay <= MAX_DELAY_TOTAL and 0 <= target_rank < comm.Get_size()):
        raise UsageError(expected)
    return delay if target_rank == comm.Get_rank() else 0.0


def timed_round(
    barrier: Callable[[], Any],
    calls: Sequence[CollectiveCall],
    order: Sequence[int],
    bufs: Buffers,
    op: ReduceOp | None,
    roots: Sequence[int],
    times: np.ndarray,
    interleaved: bool = False,
    arrivals: np.ndarray | None = None,
    delay: float = 0.0,
) -> None:
    """The hot loop: the candidates in ``order``, each called once per root, every call after
    an untimed ``barrier()`` with the timer around the call alone; the seconds of call i of
    candidate j go to times[j, i], and its start on this rank's clock to arrivals[j, i]
    when given (measurement.ranks). Blocked (default): one candidate's calls back to back,
    then the next one's; interleaved: one call of every candidate per root. On GPU buffers
    the clock stops once the device is idle (kernels are asynchronous; NCCL's calls wait
    for their stream, so MPI's must be timed alike). ``delay``: seconds slept between the
    barrier and each call, MAX_DELAY_TOTAL in all (the DELAY_ENV test hook: a rank that
    arrives late)."""
    wtime = MPI.Wtime
    send, recv = bufs.send, bufs.recv
    settle = settle_for(send, recv)
    scratch = np.zeros(times.shape) if arrivals is None else arrivals
    # This rank's heartbeat (measurement.heartbeat): the position of the call entered and
    # of the call completed, two stores outside the timer, read by a stall report.
    marks, at = heartbeat.current().step(order, len(roots), interleaved)

    def timed(call: CollectiveCall, row: np.ndarray, i: int, root: int, stamps) -> None:
        nonlocal at
        marks[0] = at = at + 1
        barrier()
        if delay:
            _DelayBudget.sleep(delay)
        start = wtime()
        call(send, recv, op, root)
        settle()
        row[i] = wtime() - start
        stamps[i] = start
        marks[1] = at

    pairs = [(calls[j], times[j], scratch[j]) for j in order]
    if interleaved:
        for i, root in enumerate(roots):
            for call, row, stamps in pairs:
                timed(call, row, i, root, stamps)
    else:
        for call, row, stamps in pairs:
            for i, root in enumerate(roots):
                timed(call, row, i, root, stamps)


def slowest_rank(comm: MPI.Comm, times: np.ndarray) -> np.ndarray:
    """Element-wise maximum of ``times`` across ranks (a new array)."""
    result = np.empty_like(times)
    comm.Allreduce(np.ascontiguousarray(times), result, MPI.MAX)
    return result


# --- OSU mode ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OsuStats:
    """One candidate's OSU statistics, in microseconds."""

    avg_us: float
    min_us: float
    max_us: float
    p50_us: float
    p99_us: float
    iter_max_us: tuple[float, ...]


@dataclass(frozen=True)
class OsuTiming:
    """What OSU mode produced for every candidate of one point; with ``per_rank``, this
    rank's call times and starts, (candidates, iterations) seconds (measurement.ranks)."""

    stats: list[OsuStats]
    wrong: list[int] | None  # None when not checked
    times: np.ndarray | None = None
    arrivals: np.ndarray | None = None


def _interleaved(
    comm: MPI.Comm,
    calls: Sequence[CollectiveCall],
    inputs: Inputs,
    roots: Sequence[int],
    arrivals: np.ndarray | None = None,
) -> np.ndarray:
    """times[candidate, iteration], the candidates interleaved within every iteration."""
    times = np.zeros((len(calls), len(roots)))
    order = range(len(calls))
    delay = delay_for(comm)
    bufs, op = inputs.bufs, inputs.op
    timed_round(comm.Barrier, calls, order, bufs, op, roots, times, True, arrivals, delay)
    return times


def osu_stats(comm: MPI.Comm, times: np.ndarray) -> OsuStats:
    """OSU's min/avg/max of per-rank means, and percentiles of per-iteration maxima."""
    mean = np.array([times.mean() if times.size else 0.0])
    lo, hi, total = np.empty(1), np.empty(1), np.empty(1)
    comm.Allreduce(mean, lo, MPI.MIN)
    comm.Allreduce(mean, hi, MPI.MAX)
    comm.Allreduce(mean, total, MPI.SUM)
    iter_max_us = slowest_rank(comm, times) * 1e6
    has = iter_max_us.size > 0
    return OsuStats(
        avg_us=float(total[0] / comm.Get_size() * 1e6),
        min_us=float(lo[0] * 1e6),
        max_us=float(hi[0] * 1e6),
        p50_us=float(np.percentile(iter_max_us, 50)) if has else 0.0,
        p99_us=float(np.percentile(iter_max_us, 99)) if has else 0.0,
        iter_max_us=tuple(round(float(t), 3) for t in iter_max_us),
    )


def measure_osu(
    comm: MPI.Comm,
    calls: Sequence[CollectiveCall],
    inputs: Inputs,
    warmup_roots: Sequence[int],
    timed_roots: Sequence[int],
    check_roots: Sequence[int] | None = None,
    per_rank: bool = False,
    unchecked: Sequence[CollectiveCall] = (),
) -> OsuTiming:
    """OSU mode: one untimed call per warm-up root and one timed call per timed root, then
    (when ``check_roots`` is given) each candidate checked at every such root; ``per_rank``
    keeps this rank's call times and starts. ``unchecked`` calls (bench's bounds) are timed
    in the same rounds, after the candidates in each, and never checked: their stats
    follow the candidates'."""
    timed = [*calls, *unchecked]
    _interleaved(comm, timed, inputs, warmup_roots)
    arrivals = np.zeros((len(timed), len(timed_roots))) if per_rank else None
    times = _interleaved(comm, timed, inputs, timed_roots, arrivals)
    stats = [osu_stats(comm, row) for row in times]
    # After every timed call, so what an unchecked call leaves in the buffers (the staging
    # bound copies a stale host mirror into recv) is gone: each check restores the inputs
    # first (Inputs.reset, or fresh buffers at another root).
    wrong = None if check_roots is None else validate_at_roots(comm, calls, inputs, check_roots)
    return OsuTiming(stats, wrong, times if per_rank else None, arrivals)


# --- Time-budget mode -------------------------------------------------------------------


def _pass_seconds(
    comm: MPI.Comm, calls: Sequence[CollectiveCall], inputs: Inputs, count: int
) -> float:
    """Wall time of ``count`` iterations of every candidate, the slowest rank's."""
    scratch = np.zeros((len(calls), count))
    roots = [inputs.shape.root] * count
    delay = delay_for(comm)
    comm.Barrier()
    start = MPI.Wtime()
    order, bufs, op = range(len(calls)), inputs.bufs, inputs.op
    timed_round(comm.Barrier, calls, order, bufs, op, roots, scratch, False, None, delay)
    elapsed = np.array([MPI.Wtime() - start])
    comm.Allreduce(MPI.IN_PLACE, elapsed, MPI.MAX)
    return float(elapsed[0])


def iteration_count(
    comm: MPI.Comm, calls: Sequence[CollectiveCall], inputs: Inputs, budget: float
) -> int:
    """Iterations per round: time growing passes until one takes a share of the budget;
    every rank reaches the same count (times are maxima across ranks)."""
    target = ITERATION_SHARE * budget
    count = 1
    heartbeat.current().phase("iterations")
    while True:
        seconds = _pass_seconds(comm, calls, inputs, count)
        following = next_iteration_count(count, seconds, target)
        if following is None:
            return iterations_for(seconds / count, budget)
        count = following


def timed_rounds(
    comm: MPI.Comm,
    calls: Sequence[CollectiveCall],
    inputs: Inputs,
    iterations: int,
    budget: float,
    reference: ReferenceTimer,
    clock: ClockSync | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """times[round, candidate, iteration] and the machine-state reference[round, (copy,
    allreduce)], in seconds, the maximum across ranks, and (with ``clock``, on rank 0)
    every rank's summary per candidate (measurement.ranks.rank_summaries). Each round
    starts with the reference. Rounds go on while the budget lasts
    (schedule.another_round); rank 0's clock decides, so every rank stops after the same
    round."""
    times = np.zeros((MAX_ROUNDS, len(calls), iterations))
    arrivals = np.zeros_like(times)
    state = np.zeros((MAX_ROUNDS, 2))
    roots = [inputs.shape.root] * iterations
    barrier, more = comm.Barrier, np.ones(1, dtype=np.int8)
    bufs, op, delay = inputs.bufs, inputs.op, delay_for(comm)
    start, rounds = MPI.Wtime(), 0
    while more[0]:
        heartbeat.current().phase("round", rounds + 1)
        state[rounds] = reference.sample()
        order = rotation(rounds, len(calls))
        timed_round(
            barrier, calls, order, bufs, op, roots, times[rounds], False, arrivals[rounds], delay
        )
        rounds += 1
        more[0] = another_round(rounds, MPI.Wtime() - start, budget)
        comm.Bcast(more, root=0)
    # Reductions after the point, so the timed loop has no extra traffic.
    heartbeat.current().phase("exchange")
    per_rank = None
    if clock is not None:
        own, starts = (
            a[:rounds].transpose(1, 0, 2).reshape(len(calls), -1) for a in (times, arrivals)
        )
        per_rank = rank_summaries(comm, starts, own, clock)
    return slowest_rank(comm, times[:rounds]), slowest_rank(comm, state[:rounds]), per_rank


@dataclass(frozen=True)
class BudgetTiming:
    """What time-budget mode produced for one point, before it becomes records."""

    wrong: list[int]
    schedule: Schedule  # as run
    times: np.ndarray  # (rounds, candidates, iterations), seconds, max across ranks
    reference: np.ndarray  # (rounds, 2): the machine state's copy and allreduce, seconds
    # Rank 0 only, with a clock: (candidates, ranks, ranks.SUMMARY_FIELDS).
    per_rank: np.ndarray | None = None

    def round_us(self) -> np.ndarray:
        """round_us[candidate, round]: a round's time, the mean over its iterations."""
        return self.times.mean(axis=2).T * 1e6


def measure_budget(
    comm: MPI.Comm,
    calls: Sequence[CollectiveCall],
    inputs: Inputs,
    budget: float,
    reference: ReferenceTimer | None = None,
    clock: ClockSync | None = None,
) -> BudgetTiming:
    """Time-budget mode: check every candidate once (its warm-up), fix the iterations per
    round (iteration_count), time rounds (each beside the machine-state reference); with
    ``clock``, per-rank times on rank 0."""
    wrong = validate(comm, calls, inputs)
    iterations = iteration_count(comm, calls, inputs, budget)
    reference = reference or ReferenceTimer(comm)
    times, state, per_rank = timed_rounds(comm, calls, inputs, iterations, budget, reference, clock)
    return BudgetTiming(wrong, Schedule(len(times), iterations), times, state, per_rank)
