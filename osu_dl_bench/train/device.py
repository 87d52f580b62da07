"""Where the trainer's tensors live: this process's CPU, or (``--device cuda``) the GPU the
rank was given, with the views and waits that hand torch's tensors to the collectives.

On the GPU the gradient buckets stay torch tensors (autograd writes into them) and the
collectives see cupy views of the same memory (``cupy.asarray`` reads torch's
``__cuda_array_interface__``; nothing is copied). torch queues its kernels on its current
stream (the legacy default stream) while the collectives run on the communication thread,
on a non-blocking stream of that thread's own (``collectives.device.use_own_stream``): on
the default stream too, NCCL and the staging copies would be ordered with backward's
kernels, and nothing would overlap. Before a bucket or the state is handed over, an event
recorded on torch's stream is waited for, so MPI or NCCL never reads a gradient a kernel
is still writing (the same rule as ``collectives.device.device_ready`` for cupy's own
kernels).

Step clocks (``step_clock``). On the CPU a step's marks are host times. On a GPU the host
returns from ``loss.backward()`` long before the device has run backward's kernels, so a
host clock would count the GPU still computing backward as communication exposed; the
marks are CUDA events instead (torch.cuda.Event(enable_timing=True), read with
``Event.elapsed_time`` once completed): backward's end and each bucket's "gradients ready"
on torch's current stream, each reduction's start and end on the communication thread's
own stream. That stream is where NCCL runs and where a staged MPI call queues its copies
(device to host, then, after MPI's reduction on the host, host to device): an event
recorded there before the call completes when the stream reaches it, and one recorded
after completes only after the copy back, which the host queued once MPI returned, so
end - start spans the whole staged call, host work included. Events on torch's stream
would be ordered after backward's kernels instead, not with the copies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from osu_dl_bench.errors import UsageError


def place(buffers: str, session: Any) -> torch.device:
    """The torch device of this rank: CPU, or for buffers 'cuda' the GPU picked for this
    node-local rank (collectives.device.select_local_gpu: collective, so on the
    communication thread, where it also makes the GPU current; then here too)."""
    if buffers != "cuda":
        return torch.device("cpu")
    session.agree(require_torch_gpu)  # a rank without one fails them all, not a hang
    index = session.thread.run(communication_gpu, session.comm)
    torch.cuda.set_device(index)  # the current device is per thread: the main one too
    import cupy

    cupy.cuda.Device(index).use()
    return torch.device("cuda", index)


def communication_gpu(comm: Any) -> int:
    """On the communication thread: choose this rank's GPU (collective over ``comm``) and
    give the thread its own non-blocking stream on it; returns the device index."""
    from collectives.device import select_local_gpu, use_own_stream

    index = select_local_gpu(comm)
    use_own_stream()  # after select_local_gpu made the device current: a stream has one
    return index


def require_torch_gpu() -> None:
    """UsageError where torch cannot use a GPU here (--device cuda)."""
    if not torch.cuda.is_available():
        raise UsageError(
            "--device cuda: torch sees no GPU here (torch.cuda.is_available() is False: "
            "no GPU, or a CPU build of torch)"
        )


def array_view(tensor: torch.Tensor) -> Any:
    """The collectives' view of ``tensor``'s memory: numpy on the CPU, cupy on a GPU."""
    if tensor.is_cuda:
        import cupy

        return cupy.asarray(tensor)
    return tensor.numpy()


def device_idle(device: torch.device) -> None:
    """Wait until ``device`` has run every kernel queued so far (nothing on the CPU): a
    clock stopped before that would leave the step's last kernels out of its time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _nothing() -> None:
    return None


def ready_marker(tensor: torch.Tensor) -> Callable[[], None]:
    """Call on the thread that queued the kernels writing ``tensor``; the returned
    function, called anywhere later, waits until they are done (nothing on the CPU)."""
    if not tensor.is_cuda:
        return _nothing
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(tensor.device))
    return event.synchronize


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the CPU (itself there already), for comparisons and checkpoints."""
    return tensor.detach().cpu() if tensor.is_cuda else tensor.detach()


@dataclass(frozen=True)
class BucketTiming:
    """One bucket in one step, in seconds from backward's end on the step's clock: its
    gradients ready, its reduction's start and end (negative: before backward ended)."""

    ready: float
    start: float
    end: float


@dataclass(frozen=True)
class StepComm:
    """One step's communication: time reducing, time exposed after backward, per bucket
    its timing, and the clock that measured them (host, or cuda events)."""

    busy: float
    exposed: float
    buckets: tuple[BucketTiming, ...] = ()
    clock: str = "host"


@dataclass(frozen=True)
class Span:
    """One bucket's marks: gradients ready (training thread), reduction start and end
    (communication thread)."""

    ready: Any
    start: Any
    end: Any


class HostClock:
    """Marks are host times (time.perf_counter): the CPU path's clock."""

    name = "host"

    def compute_mark(self) -> float:
        """Now, on the training thread."""
        return time.perf_counter()

    def comm_mark(self) -> float:
        """Now, on the communication thread."""
        return time.perf_counter()

    def wait(self, mark: float) -> None:
        """Nothing to wait for: the host's work before ``mark`` is done."""

    def step(self, backward_end: float, spans: Sequence[Span]) -> StepComm:
        """Busy: the reductions' host time; exposed: the training thread's wait from
        ``backward_end`` until now (every reduction returned)."""
        exposed = time.perf_counter() - backward_end
        timings = tuple(
            BucketTiming(s.ready - backward_end, s.start - backward_end, s.end - backward_end)
            for s in spans
        )
        return StepComm(sum(s.end - s.start for s in spans), exposed, timings, self.name)


class DeviceClock:
    """Marks are CUDA events: on torch's current stream (``compute_mark``) or on the
    calling communication thread's stream (``comm_mark``); read after they complete."""

    name = "cuda events"

    def __init__(self, device: torch.device, comm_stream: Callable[[], Any] | None = None) -> None:
        self.device = device
        self._comm_stream = comm_stream or _CupyStreams()

    def _record(self, stream: Any) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def compute_mark(self) -> Any:
        """An event after the kernels torch has queued so far (training thread)."""
        return self._record(torch.cuda.current_stream(self.device))

    def comm_mark(self) -> Any:
        """An event after the work this (communication) thread's stream has so far."""
        return self._record(self._comm_stream())

    def wait(self, mark: Any) -> None:
        """Until the device has passed ``mark``."""
        mark.synchronize()

    def step(self, backward_end: Any, spans: Sequence[Span]) -> StepComm:
        """Busy: the sum of the reductions' device time; exposed: from backward's end on
        the device to the last reduction's end (0 if that came first)."""
        for mark in (backward_end, *(m for s in spans for m in (s.ready, s.start, s.end))):
            mark.synchronize()  # elapsed_time refuses events the device has not reached

        def since_backward(mark: Any) -> float:
            return backward_end.elapsed_time(mark) / 1e3

        busy = sum(s.start.elapsed_time(s.end) for s in spans) / 1e3
        exposed = max([0.0, *(since_backward(s.end) for s in spans)])
        timings = tuple(
            BucketTiming(since_backward(s.ready), since_backward(s.start), since_backward(s.end))
            for s in spans
        )
        return StepComm(busy, exposed, timings, self.name)


class _CupyStreams:
    """The calling thread's current cupy stream (``collectives.device.use_own_stream`` on
    the communication thread) as a torch stream, so torch's events can be recorded on it;
    one torch view per stream (the trainer's streams live as long as the process)."""

    def __init__(self) -> None:
        self._views: dict[int, Any] = {}

    def __call__(self) -> Any:
        import cupy

        ptr = cupy.cuda.get_current_stream().ptr
        if ptr not in self._views:
            self._views[ptr] = torch.cuda.ExternalStream(ptr)
        return self._views[ptr]


def step_clock(device: torch.device) -> HostClock | DeviceClock:
    """The clock of a step on ``device``: CUDA events on a GPU, the host's elsewhere."""
    return DeviceClock(device) if device.type == "cuda" else HostClock()
