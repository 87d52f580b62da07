"""cupy.cuda of the strict stand-in: streams, devices, the runtime and NCCL.

Streams follow CUDA's rules (CUDA Runtime API, "Stream synchronization behavior"; cupy
docs, ``cupy.cuda.Stream``): the current stream is per thread and starts as the legacy
default stream ``Stream.null``; work on the null stream is ordered against every blocking
stream (a plain ``Stream()``), while a ``Stream(non_blocking=True)`` is ordered only
against itself. ``synchronize`` completes what the stream is ordered with, so syncing one
stream does not make memory that another, unordered stream is still writing safe.
"""

from __future__ import annotations

import itertools
import threading

from . import memory, nccl, runtime

_handles = itertools.count(1)
_local = threading.local()


class Stream:
    """cupy.cuda.Stream(null=False, non_blocking=False, ptds=False); ``use`` makes it the
    calling thread's current stream; ``synchronize`` waits for what it is ordered with."""

    null: Stream  # the legacy default stream, set below

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False):
        self.is_null = bool(null)
        self.non_blocking = bool(non_blocking) and not null
        self.ptr = 0 if null else next(_handles)

    def use(self) -> Stream:
        _local.stream = self
        return self

    def __enter__(self) -> Stream:
        _local.__dict__.setdefault("stack", []).append(get_current_stream())
        return self.use()

    def __exit__(self, *exc) -> None:
        _local.stack.pop().use()

    def ordered_with(self, other: Stream) -> bool:
        """Whether work on ``other`` completes before later work on this stream does."""
        if other is self:
            return True
        return not (self.non_blocking or other.non_blocking)

    def synchronize(self) -> None:
        import cupy

        cupy._synchronize(self)

    def __repr__(self) -> str:
        kind = "null" if self.is_null else ("non-blocking" if self.non_blocking else "blocking")
        return f"<strict Stream {kind} {self.ptr}>"


Stream.null = Stream(null=True)


def get_current_stream() -> Stream:
    """The calling thread's current stream (``Stream.null`` until one is used)."""
    return getattr(_local, "stream", Stream.null)


class Device:
    """cupy.cuda.Device(index=None): ``use`` makes it current; ``synchronize`` waits for
    all of its streams."""

    _current = 0

    def __init__(self, device=None):
        count = runtime.getDeviceCount()
        self.id = Device._current if device is None else int(device)
        if not 0 <= self.id < count:
            raise runtime.CUDARuntimeError(f"cudaErrorInvalidDevice: device {self.id} of {count}")

    def use(self) -> None:
        Device._current = self.id

    def synchronize(self) -> None:
        import cupy

        cupy._synchronize()


__all__ = ["Device", "Stream", "get_current_stream", "memory", "nccl", "runtime"]
