"""A data-parallel model replica: state broadcast from rank 0 at start, gradients averaged
bucket by bucket during backward, one optimizer step per global batch.

Every rank computes the loss as the mean over its share of the global batch; averaging
those gradients over the ranks, each weighted by its share (shares differ by one sample
where p does not divide the batch), gives the gradient of the mean over the whole batch,
so a step equals a 1-process step with the global batch (up to summation order).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from collectives.buffers import array_module
from collectives.device import device_ready
from collectives.registry import CollectiveCall
from osu_dl_bench.errors import UsageError
from osu_dl_bench.train.buckets import GradBucket, flatten_state, make_buckets
from osu_dl_bench.train.comm_hooks import (
    WRONG_ALLREDUCE_ENV,
    GradReduce,
    delayed,
    fp16_compress,
    mean_allreduce,
    perturb_first_element,
    share_divisor,
)
from osu_dl_bench.train.config import TrainConfig
from osu_dl_bench.train.device import array_view, device_idle, ready_marker
from osu_dl_bench.train.policy import BoundCollective
from osu_dl_bench.train.reducer import GradientReducer, StepComm
from osu_dl_bench.train.session import Session


@dataclass(frozen=True)
class StepStats:
    """One step on one rank: summed loss and hits over its samples, time, communication."""

    loss_sum: float
    correct: int
    samples: int
    seconds: float
    comm: StepComm


@dataclass(frozen=True)
class CallPlan:
    """Which algorithm a bucket or a broadcast uses, for reports."""

    index: int
    nbytes: int
    dtype: str
    algorithm: str
    how: str
    tensors: int


def make_optimizer(cfg: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """SGD with momentum (no Adam: its division by tiny second moments would amplify the
    rounding differences that --validate bounds)."""
    return torch.optim.SGD(
        model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )


# Under --validate the model is the float64 copy of a float32 run: buckets are planned and
# algorithms chosen by the float32 sizes, so the layout and the tuning table's picks are
# those of the run being validated.
_TRAINED_ITEMSIZE = np.dtype(np.float32).itemsize


def selection_nbytes(array: np.ndarray, validate: bool) -> int:
    """Bytes the policy chooses an algorithm by (float64 counts as float32 under
    --validate)."""
    if validate and array.dtype == np.float64:
        return array.size * _TRAINED_ITEMSIZE
    return array.nbytes


def _scratch(bucket: GradBucket, cfg: TrainConfig) -> np.ndarray:
    """What the bucket's allreduce reduces: the bucket itself, or with fp16 compression a
    float16 scratch of its length allocated once (as the buckets are: ``cfg.buffers``)."""
    if cfg.fp16_compress:
        return array_module(cfg.buffers).empty(bucket.array.size, np.float16)
    return bucket.array


def _reduce_with(call: CollectiveCall, divisor: float, scratch: np.ndarray, bucket: GradBucket):
    """The bucket's mean allreduce through ``call``; fp16 wraps it where ``scratch`` is not
    the bucket."""
    if scratch is bucket.array:
        return mean_allreduce(call, divisor)
    return fp16_compress(mean_allreduce(call, divisor), scratch)


def _slowed(reduce: GradReduce, label: str, slow: tuple[str, float] | None) -> GradReduce:
    """``reduce``, delayed by the SLOW_CANDIDATE_ENV test hook where it names ``label``."""
    if slow is None or slow[0] != label:
        return reduce
    return delayed(reduce, slow[1])


def _check_wrong(wrong: tuple[int, int, float] | None, nprocs: int, buckets: int) -> None:
    """UsageError (on every rank alike) if the test hook names no rank or bucket: a hook
    that silently perturbs nothing would make its test pass for the wrong reason."""
    if wrong is not None and not (wrong[0] < nprocs and wrong[1] < buckets):
        raise UsageError(
            f"{WRONG_ALLREDUCE_ENV}: rank {wrong[0]}, bucket {wrong[1]} do not exist "
            f"(p={nprocs}, {buckets} bucket(s))"
        )


class DataParallelTrainer:
    """A replica of ``model`` kept equal to rank 0's by broadcast and averaged gradients."""

    def __init__(
        self,
        model: nn.Module,
        cfg: TrainConfig,
        session: Session,
        wrong: tuple[int, int, float] | None = None,
        slow: tuple[str, float] | None = None,
    ) -> None:
        """``wrong``: (rank, bucket, delta) of the WRONG_ALLREDUCE_ENV test hook; ``slow``:
        (label, seconds) of the SLOW_CANDIDATE_ENV one."""
        self.model, self.session, self.validate = model, session, cfg.validate
        # Flat before the optimizer sees the parameters (it keeps the same objects).
        self.state_flats = flatten_state([*model.parameters(), *model.buffers()])
        self.optimizer = make_optimizer(cfg, model)
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.device = next(model.parameters()).device
        # torch allocates CPU and GPU buckets (GPU ones reach the collectives as cupy views).
        zeros = array_module(cfg.buffers).zeros if cfg.buffers == "cpu-registered" else None
        itemsize = _TRAINED_ITEMSIZE if cfg.validate else None
        self.buckets = make_buckets(
            trainable,
            cfg.bucket_cap,
            cfg.first_bucket,
            zeros,
            plan_itemsize=itemsize,
            device=self.device,
        )
        _check_wrong(wrong, session.nprocs, len(self.buckets))
        self.wrong, self.slow = wrong, slow
        self.divisor = share_divisor(cfg.batch_size, cfg.local_batch(session.nprocs, session.rank))
        self.scratches = [_scratch(b, cfg) for b in self.buckets]
        self.selection_bytes = [
            scratch.nbytes if cfg.fp16_compress else selection_nbytes(scratch, cfg.validate)
            for scratch in self.scratches
        ]
        bounds = session.thread.run(
            lambda: [
                session.choose("allreduce", s, n)
                for s, n in zip(self.scratches, self.selection_bytes, strict=True)
            ]
        )
        self.bucket_plans = [
            CallPlan(b.index, s.nbytes, s.dtype.name, bound.label, bound.how, len(b.params))
            for b, s, bound in zip(self.buckets, self.scratches, bounds, strict=True)
        ]
        self.reducer = GradientReducer(self.buckets, [], session.thread, cfg.overlap)
        self.table_reduces = [self.reduce_of(i, bound) for i, bound in enumerate(bounds)]
        self.install(self.table_reduces)
        self.bcast_plans: list[CallPlan] = []

    def reduce_of(self, index: int, bound: BoundCollective) -> GradReduce:
        """Bucket ``index``'s mean allreduce through ``bound`` (the slow-candidate test hook
        applied where it names it)."""
        bucket, scratch = self.buckets[index], self.scratches[index]
        reduce = _reduce_with(bound.call, self.divisor, scratch, bucket)
        return _slowed(reduce, bound.label, self.slow)

    def install(self, reduces: Sequence[GradReduce]) -> None:
        """Reduce the buckets with ``reduces`` from the next step on (between steps only:
        no reduction is in flight then); the wrong-allreduce test hook stays on its bucket."""
        reduces = list(reduces)
        wrong = self.wrong
        if wrong is not None and wrong[0] == self.session.rank:
            reduces[wrong[1]] = perturb_first_element(reduces[wrong[1]], wrong[2])
        self.reducer.reduces = reduces

    def broadcast_state(self, root: int = 0) -> float:
        """Make every replica's parameters and buffers equal ``root``'s; seconds taken."""
        start = time.perf_counter()
        self.bcast_plans = []
        for index, flat in enumerate(self.state_flats):
            ready_marker(flat)()  # the model's kernels (.to(device), init) are done
            array = array_view(flat)
            bound = self.session.bcast(array, root, selection_nbytes(array, self.validate))
            device_ready(array)
            self.bcast_plans.append(
                CallPlan(index, array.nbytes, array.dtype.name, bound.label, bound.how, 0)
            )
        return time.perf_counter() - start

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        """Forward, backward with overlapped averaging, optimizer step."""
        start = time.perf_counter()
        self.model.train()
        self.reducer.start_step()
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        logits = self.model(x)
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        comm = self.reducer.finish_step()
        self.optimizer.step()
        device_idle(self.device)  # the optimizer's kernels belong to this step's time
        seconds = time.perf_counter() - start
        correct = int((logits.argmax(1) == y).sum())
        return StepStats(loss.item() * len(y), correct, len(y), seconds, comm)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int = 512) -> np.ndarray:
    """[summed loss, correct, count] of ``model`` on (x, y), as float64 for a sum allreduce."""
    model.eval()
    device = next(model.parameters()).device
    totals = np.zeros(3)
    for start in range(0, len(x), chunk):
        logits = model(x[start : start + chunk].to(device))
        target = y[start : start + chunk].to(device)
        totals[0] += float(nn.functional.cross_entropy(logits, target, reduction="sum"))
        totals[1] += int((logits.argmax(1) == target).sum())
        totals[2] += len(target)
    return totals
