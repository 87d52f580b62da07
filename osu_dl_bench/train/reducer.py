"""Gradient averaging overlapped with backward: per-parameter autograd hooks, buckets
launched in order on the communication thread, and the accounting of hidden time.

Per step (PyTorch DDP's design, Li et al., VLDB 2020):
  1. ``start_step`` zeroes the bucket buffers and re-arms the per-bucket counters;
  2. during backward, ``register_post_accumulate_grad_hook`` tells us a parameter's
     gradient is final; when a bucket's last one is, the bucket is ready; ready buckets
     are launched strictly in bucket order (as DDP does), so every rank issues the same
     collectives in the same order whatever order its hooks fire in;
  3. ``finish_step`` launches whatever is left (parameters unused this step, or
     everything with overlap off), waits, and returns the step's communication time.

Accounting (``train.device.step_clock``): ``busy`` is the time inside the bucket
reductions; ``exposed`` is the time from backward's end until the last reduction's end.
The rest of ``busy`` ran while backward was still computing: hidden = 1 - exposed / busy.
On the CPU both are host times (exposed: backward's caller waiting for the reductions); on
a GPU they are CUDA events, so backward's end is where the device finished it, not where
the host returned from queueing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from osu_dl_bench.train.buckets import GradBucket
from osu_dl_bench.train.comm_hooks import GradReduce
from osu_dl_bench.train.comm_thread import CommThread
from osu_dl_bench.train.device import DeviceClock, HostClock, Span, StepComm, step_clock

__all__ = ["GradientReducer", "StepComm"]


class GradientReducer:
    """Averages the gradients in ``buckets`` over ranks, each with its own ``reduce``."""

    def __init__(
        self,
        buckets: Sequence[GradBucket],
        reduces: Sequence[GradReduce],
        comm_thread: CommThread,
        overlap: bool = True,
        clock: HostClock | DeviceClock | None = None,
    ) -> None:
        """``clock``: the step's (None: the buckets' device's, ``step_clock``)."""
        self.buckets, self.reduces = list(buckets), list(reduces)
        self.comm_thread, self.overlap = comm_thread, overlap
        device = self.buckets[0].flat.device if self.buckets else None
        self.clock = clock or (step_clock(device) if device is not None else HostClock())
        self._pending = [0] * len(self.buckets)
        self._next = len(self.buckets)  # nothing launches until start_step
        self._futures: list[Future[Span]] = []
        self._handles = [
            param.register_post_accumulate_grad_hook(lambda _p, b=bucket.index: self._ready(b))
            for bucket in self.buckets
            for param in bucket.params
        ]

    def start_step(self) -> None:
        """Zero the gradient buffers (keeping them as the .grad views) and re-arm."""
        for bucket in self.buckets:
            bucket.flat.zero_()
        self._pending = [len(b.params) for b in self.buckets]
        self._next, self._futures = 0, []

    def _ready(self, index: int) -> None:
        """Hook: one more gradient of bucket ``index`` is final."""
        self._pending[index] -= 1
        if self.overlap:
            self._launch_ready()

    def _launch_ready(self) -> None:
        while self._next < len(self.buckets) and self._pending[self._next] <= 0:
            self._launch(self._next)

    def _launch(self, index: int) -> None:
        # Marked here, on the thread that queued the gradients' kernels (GPU: an event).
        ready = self.clock.compute_mark()
        self._futures.append(self.comm_thread.submit(self._reduce, index, ready))
        self._next = index + 1

    def _reduce(self, index: int, ready: Any) -> Span:
        """On the communication thread: reduce one bucket once its gradients are written;
        returns its marks (start and end on this thread's clock, GPU: its stream)."""
        self.clock.wait(ready)
        start = self.clock.comm_mark()
        self.reduces[index](self.buckets[index].array)
        return Span(ready, start, self.clock.comm_mark())

    def finish_step(self) -> StepComm:
        """Launch the remaining buckets in order, wait for all; the step's accounting.
        Call right after backward returns (its end is marked here)."""
        backward_end = self.clock.compute_mark()
        while self._next < len(self.buckets):
            self._launch(self._next)
        spans = [future.result() for future in self._futures]
        return self.clock.step(backward_end, spans)

    def remove_hooks(self) -> None:
        """Detach from the model (the model keeps training without averaging)."""
        for handle in self._handles:
            handle.remove()
