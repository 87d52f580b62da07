"""What a training run reports, as frozen records (printed and written from the same data),
and the statistics behind them.

Throughput follows Horovod's synthetic benchmark (examples/pytorch/
pytorch_synthetic_benchmark.py): img/s per timing iteration of ``batches_per_iter`` steps
after warm-up, reported as mean +- 1.96 std; per rank over every (rank, iteration), in
total over iterations of the sum across ranks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

Z95 = 1.96


@dataclass(frozen=True)
class EpochRecord:
    """One epoch (or the part of it this process ran), summed over ranks."""

    epoch: int
    steps: int
    train_loss: float
    train_accuracy: float
    test_loss: float | None
    test_accuracy: float | None
    seconds: float


@dataclass(frozen=True)
class Throughput:
    """img/s as mean and 1.96 std: per rank, and the job's total."""

    per_rank_mean: float
    per_rank_ci: float
    total_mean: float
    total_ci: float
    iterations: int
    batches_per_iter: int
    local_batch: int


@dataclass(frozen=True)
class BucketCommRecord:
    """One bucket's timing, ms from backward's end (negative: before it), averaged over
    timed steps and ranks: its gradients ready, its reduction's start and end."""

    index: int
    ready_ms: float
    start_ms: float
    end_ms: float


@dataclass(frozen=True)
class CommRecord:
    """Gradient communication, per step averaged over timed steps and ranks."""

    busy_ms: float  # inside bucket reductions
    exposed_ms: float  # from backward's end to the last reduction's end
    hidden_fraction: float | None  # 1 - exposed / busy
    step_ms: float
    bcast_ms: float
    clock: str = "host"  # host (CPU), or cuda events (on the device: train.device)
    buckets: list[BucketCommRecord] = field(default_factory=list)


@dataclass(frozen=True)
class ValidationRecord:
    """p-rank vs 1-process parameters after ``steps`` steps: the worst element over every
    rank's replica, where it is, and the tolerance it is held to."""

    max_abs_diff: float
    tolerance: float
    steps: int
    rank: int = 0
    parameter: str = ""
    dtype: str = "float64"

    @property
    def passed(self) -> bool:
        """True within tolerance (NaN fails)."""
        return bool(self.max_abs_diff <= self.tolerance)


@dataclass(frozen=True)
class TrainSummary:
    """Everything a run reports (JSON via as_dict)."""

    config: dict[str, Any]
    nprocs: int
    nodes: int
    ppn: int
    model: str
    parameters: int
    data: str
    train_samples: int
    test_samples: int
    threads: int
    start_step: int
    total_steps: int
    buckets: list[dict[str, Any]]
    bcasts: list[dict[str, Any]]
    epochs: list[EpochRecord] = field(default_factory=list)
    throughput: Throughput | None = None
    communication: CommRecord | None = None
    validation: ValidationRecord | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    policy_note: str = ""  # why the defaults on GPUs are what they are (a fallback's reason)
    check: Any = None  # --check-table's report (train.check.CheckRecord), rank 0's

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (the validation verdict included)."""
        data = asdict(self)
        if self.validation is not None:
            data["validation"]["passed"] = self.validation.passed
        return data


def iteration_rates(step_seconds: np.ndarray, local_batch: int, warmup: int, per_iter: int):
    """img/s of each complete timing iteration after ``warmup`` steps (maybe empty)."""
    timed = step_seconds[warmup:]
    count = len(timed) // per_iter
    grouped = timed[: count * per_iter].reshape(count, per_iter).sum(axis=1)
    return local_batch * per_iter / grouped


def throughput(rates: np.ndarray, per_iter: int, local_batch: int) -> Throughput | None:
    """From every rank's iteration rates (ranks x iterations); None without iterations."""
    if rates.size == 0:
        return None
    total = rates.sum(axis=0)
    return Throughput(
        float(rates.mean()),
        float(Z95 * rates.std()),
        float(total.mean()),
        float(Z95 * total.std()),
        rates.shape[1],
        per_iter,
        local_batch,
    )


def comm_record(
    sums: np.ndarray,
    nprocs: int,
    bcast_seconds: float,
    clock: str = "host",
    bucket_sums: np.ndarray | None = None,
) -> CommRecord | None:
    """From [busy s, exposed s, step s, timed steps] summed over ranks, and per bucket
    [ready, start, end] s from backward's end, summed alike (buckets x 3)."""
    busy, exposed, step, steps = sums
    if steps == 0:
        return None
    per = 1e3 / steps  # sums over ranks of totals over steps -> ms per rank-step
    hidden = max(0.0, 1.0 - exposed / busy) if busy > 0 else None
    buckets = [
        BucketCommRecord(index, *(float(v) * per for v in row))
        for index, row in enumerate(bucket_sums if bucket_sums is not None else ())
    ]
    return CommRecord(
        busy * per, exposed * per, hidden, step * per, bcast_seconds * 1e3, clock, buckets
    )
