"""Array modules for buffer kinds: numpy for host memory (``cpu``: private memory,
``cpu-registered``: memory the node's other ranks can map, collectives.registered), cupy
for GPU memory (``cuda``)."""

from __future__ import annotations

from types import ModuleType

import numpy as np

from collectives.errors import UsageError

DEVICES = ("cpu", "cpu-registered", "cuda")
HOST_DEVICES = ("cpu", "cpu-registered")


def is_host(device: str) -> bool:
    """True for the buffer kinds in host memory (numpy arrays)."""
    return device in HOST_DEVICES


def cuda_unavailable_reason() -> str | None:
    """None if cupy and a CUDA GPU are usable here, else why not."""
    try:
        import cupy
    except ImportError:
        return "cupy is not installed (pip install 'osu-dl-bench[cuda]')"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # cupy raises its own CUDARuntimeError without a driver
        return f"no CUDA device is usable: {exc}"
    return None if count > 0 else "no CUDA device found"


def array_module(device: str) -> ModuleType:
    """numpy for 'cpu', numpy allocating registered memory for 'cpu-registered', cupy for
    'cuda'; a UsageError if that buffer kind is unusable here."""
    if device == "cpu":
        return np
    if device == "cpu-registered":
        from collectives import registered

        reason = registered.unavailable_reason()
        if reason:
            raise UsageError(f"-d cpu-registered is not available here: {reason}")
        return registered.ARRAYS
    if device == "cuda":
        reason = cuda_unavailable_reason()
        if reason:
            raise UsageError(f"-d cuda needs cupy and a CUDA GPU: {reason}")
        import cupy

        return cupy
    raise UsageError(f"unknown device {device!r}: expected one of {', '.join(DEVICES)}")


def to_host(array) -> np.ndarray:
    """A numpy view or copy of a numpy or cupy array."""
    return array if isinstance(array, np.ndarray) else array.get()
