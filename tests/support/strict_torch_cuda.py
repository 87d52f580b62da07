"""A strict stand-in for the part of ``torch.cuda`` the trainer's step clock uses: timing
events and streams on a scripted device clock (milliseconds), failing where torch and CUDA
fail.

- Host time is per thread: a thread's time moves only when it waits (``synchronize``), so
  a thread that queues kernels and returns at once (backward) stays early.
- ``Stream``: work queued on it runs in order; ``run(ms)`` queues a kernel of ``ms`` that
  starts when the stream's earlier work is done and not before the calling thread queued
  it.
- ``Event(enable_timing=False)``: ``record(stream)`` (default: the calling thread's current
  stream) marks the point after the work queued there so far; for a thread it has
  completed once that thread has waited past it (``synchronize``, or a stream's).
  ``elapsed_time`` raises as torch does (aten/src/ATen/cuda/CUDAEvent.h): "Both events
  must be recorded before calculating elapsed time.", "Both events must be created with
  argument 'enable_timing=True'.", and cudaErrorNotReady ("device not ready") while either
  has not completed.
- ``current_stream(device)``: per thread (torch's current stream is thread-local), the
  device's default stream unless ``set_stream`` changed it; ``ExternalStream(ptr)``: one
  stream per pointer (a cupy stream's ``ptr``).

``install(monkeypatch)`` puts these on ``torch.cuda`` for one test.
"""

from __future__ import annotations

import threading
from typing import Any


class Timeline:
    """Each host thread's time as the device sees it: work it queues starts no earlier."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def host_ms(self) -> float:
        return getattr(self._local, "ms", 0.0)

    @host_ms.setter
    def host_ms(self, ms: float) -> None:
        self._local.ms = ms


class Stream:
    """Work in order on a scripted clock."""

    def __init__(self, timeline: Timeline, name: str) -> None:
        self.timeline, self.name, self.tail_ms = timeline, name, 0.0

    def run(self, ms: float) -> None:
        """Queue a kernel of ``ms``."""
        self.tail_ms = max(self.tail_ms, self.timeline.host_ms) + ms

    def synchronize(self) -> None:
        """The host waits for everything queued here."""
        self.timeline.host_ms = max(self.timeline.host_ms, self.tail_ms)

    def __repr__(self) -> str:
        return f"<strict torch.cuda stream {self.name}>"


class StrictTorchCuda:
    """The stand-in's state: one device's timeline, its default stream, per-thread current
    streams and the external streams by pointer."""

    def __init__(self) -> None:
        self.timeline = Timeline()
        self.default = Stream(self.timeline, "default")
        self._local = threading.local()
        self._external: dict[int, Stream] = {}
        cuda = self

        class Event:
            """torch.cuda.Event on the scripted clock."""

            def __init__(self, enable_timing: bool = False, **_: Any) -> None:
                self.enable_timing, self.time_ms = enable_timing, None

            def record(self, stream: Stream | None = None) -> None:
                stream = stream or cuda.current_stream()
                if not isinstance(stream, Stream):
                    raise TypeError(f"record() expects a stream, got {stream!r}")
                self.time_ms = max(stream.tail_ms, cuda.timeline.host_ms)
                stream.tail_ms = self.time_ms

            def query(self) -> bool:
                return self.time_ms is None or cuda.timeline.host_ms >= self.time_ms

            def synchronize(self) -> None:
                if self.time_ms is not None:
                    cuda.timeline.host_ms = max(cuda.timeline.host_ms, self.time_ms)

            def elapsed_time(self, end: Event) -> float:
                if self.time_ms is None or end.time_ms is None:
                    raise RuntimeError(
                        "Both events must be recorded before calculating elapsed time."
                    )
                if not (self.enable_timing and end.enable_timing):
                    raise RuntimeError(
                        "Both events must be created with argument 'enable_timing=True'."
                    )
                if not (self.query() and end.query()):
                    raise RuntimeError("CUDA error: device not ready")
                return end.time_ms - self.time_ms

        self.Event = Event

    def current_stream(self, device: Any = None) -> Stream:
        """The calling thread's current stream."""
        return getattr(self._local, "stream", self.default)

    def set_stream(self, stream: Stream) -> None:
        """Make ``stream`` the calling thread's current stream."""
        self._local.stream = stream

    def ExternalStream(self, ptr: int, device: Any = None) -> Stream:  # noqa: N802 - torch's
        """The stream behind pointer ``ptr`` (the same object for the same pointer)."""
        if not isinstance(ptr, int) or ptr == 0:
            raise ValueError(f"ExternalStream needs a stream pointer, got {ptr!r}")
        return self._external.setdefault(ptr, Stream(self.timeline, f"external {ptr}"))

    def synchronize(self, device: Any = None) -> None:
        """The host waits for every stream."""
        for stream in (self.default, *self._external.values()):
            stream.synchronize()

    def install(self, monkeypatch: Any) -> StrictTorchCuda:
        """Replace torch.cuda's events and streams by these for one test."""
        import torch

        for name in ("Event", "current_stream", "set_stream", "ExternalStream", "synchronize"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        return self
