"""Gradient reductions with one signature, ``reduce(buffer)``: in place, the buffer
becomes the mean over ranks. Wrappers compose, as PyTorch's DDP communication hooks do
(torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py): ``fp16_compress`` wraps
any reduction. ``perturb_first_element`` is a deliberately wrong one, for tests of
``--validate`` only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import numpy as np

from collectives.device import device_ready
from collectives.ops import reduce_op
from collectives.registry import CollectiveCall
from osu_dl_bench.errors import UsageError

GradReduce = Callable[[np.ndarray], None]
# Test hook, never for real runs: 'RANK:BUCKET[:DELTA]' makes rank RANK add DELTA (1e-6)
# to the first element of gradient bucket BUCKET after each of its reductions, i.e. an
# allreduce that is wrong in one element on one rank; --validate must then fail.
WRONG_ALLREDUCE_ENV = "OSU_DL_BENCH_TRAIN_WRONG_ALLREDUCE"
DEFAULT_WRONG_DELTA = 1e-6
# Test hook, never for real runs: 'LABEL:SECONDS' makes every rank sleep SECONDS inside
# each reduction that runs algorithm LABEL (e.g. 'ring:seg=64K:0.02'), on the
# communication thread between the call's start and end marks: a candidate made slower
# in training, as the bench kernel's delay hook slows a rank. Refused unless the run both
# checks its table (--check-table, --adapt) and validates (--validate): a float64 run
# compared with 1-process training is never a production run.
SLOW_CANDIDATE_ENV = "OSU_DL_BENCH_TRAIN_SLOW_CANDIDATE"
SLOW_CANDIDATE_MAX = 10.0  # seconds: a typo (20 for 0.02) fails instead of stalling a job


def mean_allreduce(call: CollectiveCall, divisor: float) -> GradReduce:
    """Average over ranks with an in-place sum allreduce ``call`` (any registry algorithm):
    each rank divides by ``divisor`` (share_divisor: p where shares are equal) first."""
    op = reduce_op("sum")

    def reduce(buffer: np.ndarray) -> None:
        # Divide first, as DDP's allreduce_hook does: p fp16 gradients may overflow when
        # summed where their mean would not.
        if divisor != 1:
            np.divide(buffer, divisor, out=buffer)  # cupy's kernel on a GPU buffer
            device_ready(buffer)  # MPI must not read it before the kernel wrote it
        call(None, buffer, op, 0)
        device_ready(buffer)  # the optimizer's kernels read what the last step wrote

    return reduce


def share_divisor(global_batch: int, share: int) -> float:
    """What a rank divides its mean gradient by so that the sum over ranks is the mean
    over the global batch: global_batch / share (exactly p when shares are equal).

    The gradient of the global mean is sum_r (share_r / global_batch) * grad_r, where
    grad_r is rank r's mean-loss gradient; equal shares make it DDP's plain average.
    """
    return global_batch / share


def fp16_compress(inner: GradReduce, scratch: np.ndarray) -> GradReduce:
    """Run ``inner`` on a float16 copy (half the bytes on the wire), then copy back.

    ``scratch`` is a float16 array of the buffer's length, allocated once per bucket so a
    step allocates nothing.
    """

    def reduce(buffer: np.ndarray) -> None:
        np.copyto(scratch, buffer, casting="same_kind")
        device_ready(scratch)
        inner(scratch)
        np.copyto(buffer, scratch)
        device_ready(buffer)

    return reduce


def parse_wrong_allreduce(text: str) -> tuple[int, int, float] | None:
    """WRONG_ALLREDUCE_ENV's 'RANK:BUCKET[:DELTA]' -> (rank, bucket, delta); '' -> None."""
    if not text.strip():
        return None
    fields = [f.strip() for f in text.strip().split(":")]
    try:
        if len(fields) not in (2, 3) or not all(f.isdigit() for f in fields[:2]):
            raise ValueError
        delta = float(fields[2]) if len(fields) == 3 else DEFAULT_WRONG_DELTA
        if not math.isfinite(delta) or delta == 0:
            raise ValueError
    except ValueError:
        raise UsageError(
            f"{WRONG_ALLREDUCE_ENV}={text!r}: expected RANK:BUCKET[:DELTA] with a finite "
            f"non-zero DELTA, e.g. 1:0:1e-6 (a test hook)"
        ) from None
    return int(fields[0]), int(fields[1]), delta


def wrong_allreduce_hook(
    environ: Mapping[str, str], validate: bool
) -> tuple[int, int, float] | None:
    """The hook's setting in ``environ``; a UsageError unless under --validate."""
    wrong = parse_wrong_allreduce(environ.get(WRONG_ALLREDUCE_ENV, ""))
    if wrong is not None and not validate:
        # Left set by accident, it would corrupt a real run without a word.
        raise UsageError(f"{WRONG_ALLREDUCE_ENV} is a test hook for --validate: unset it")
    return wrong


def perturb_first_element(inner: GradReduce, delta: float) -> GradReduce:
    """``inner``, then ``delta`` added to the buffer's first element (test hook)."""

    def reduce(buffer: np.ndarray) -> None:
        inner(buffer)
        buffer[0] += delta

    return reduce


def parse_slow_candidate(text: str) -> tuple[str, float] | None:
    """SLOW_CANDIDATE_ENV's 'LABEL:SECONDS' -> (label, seconds); '' -> None."""
    if not text.strip():
        return None
    label, _, seconds = text.strip().rpartition(":")
    try:
        delay = float(seconds)
        if not label or not 0 < delay <= SLOW_CANDIDATE_MAX:
            raise ValueError
    except ValueError:
        raise UsageError(
            f"{SLOW_CANDIDATE_ENV}={text!r}: expected LABEL:SECONDS with SECONDS in "
            f"(0, {SLOW_CANDIDATE_MAX:g}], e.g. ring:seg=64K:0.02 (a test hook)"
        ) from None
    return label.strip(), delay


def slow_candidate_hook(
    environ: Mapping[str, str], validate: bool, check: bool
) -> tuple[str, float] | None:
    """The hook's setting in ``environ``; a UsageError unless under --validate and a check
    of the table (--check-table or --adapt)."""
    slow = parse_slow_candidate(environ.get(SLOW_CANDIDATE_ENV, ""))
    if slow is not None and not (validate and check):
        # Left set by accident, it would slow a real run's algorithm without a word.
        raise UsageError(
            f"{SLOW_CANDIDATE_ENV} is a test hook for --check-table with --validate: unset it"
        )
    return slow


def delayed(inner: GradReduce, seconds: float) -> GradReduce:
    """``inner``, then a sleep of ``seconds`` inside the reduction (test hook)."""

    def reduce(buffer: np.ndarray) -> None:
        inner(buffer)
        time.sleep(seconds)

    return reduce
