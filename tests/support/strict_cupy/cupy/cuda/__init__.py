"""cupy.cuda of the strict stand-in: streams, devices, the runtime and NCCL."""

from __future__ import annotations

from . import nccl, runtime


class Stream:
    """The current stream: ``synchronize`` completes every queued kernel."""

    ptr = 0

    def synchronize(self) -> None:
        import cupy

        cupy._synchronize()


_STREAM = Stream()


def get_current_stream() -> Stream:
    return _STREAM


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


__all__ = ["Device", "Stream", "get_current_stream", "nccl", "runtime"]
