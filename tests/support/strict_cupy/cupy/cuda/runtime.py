"""cupy.cuda.runtime of the strict stand-in. STRICT_CUPY_DEVICES (default 8) physical
devices on this host; CUDA_VISIBLE_DEVICES narrows and renumbers them, as CUDA does."""

from __future__ import annotations

import hashlib
import os
import socket

initialised = False


class CUDARuntimeError(RuntimeError):
    pass


def _visible() -> list[int]:
    global initialised
    initialised = True
    physical = int(os.environ.get("STRICT_CUPY_DEVICES", "8"))
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return list(range(physical))
    return [int(x) for x in mask.split(",") if x.strip().isdigit() and int(x) < physical]


def getDeviceCount() -> int:  # noqa: N802 - cupy's name
    count = len(_visible())
    if count == 0:
        raise CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    return count


def getDeviceProperties(device: int) -> dict:  # noqa: N802 - cupy's name
    visible = _visible()
    physical = visible[device]
    uuid = hashlib.md5(f"{socket.gethostname()}:{physical}".encode()).digest()
    return {"name": b"Strict fake GPU", "uuid": uuid, "pciBusID": physical}


def deviceSynchronize() -> None:  # noqa: N802 - cupy's name
    import cupy

    cupy._synchronize()


def runtimeGetVersion() -> int:  # noqa: N802 - cupy's name
    return 12040


def driverGetVersion() -> int:  # noqa: N802 - cupy's name
    return 12040


def memGetInfo() -> tuple[int, int]:  # noqa: N802 - cupy's name
    """(free, total) bytes of the current device: STRICT_CUPY_DEVICE_MEMORY (default 16 GiB)
    less what the live device arrays hold."""
    import cupy

    _visible()
    total = int(os.environ.get("STRICT_CUPY_DEVICE_MEMORY", str(16 << 30)))
    return max(0, total - cupy.device_bytes_held()), total
