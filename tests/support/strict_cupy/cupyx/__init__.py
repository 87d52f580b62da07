"""cupyx of the strict stand-in: pinned host arrays (plain numpy here), taken from a pool
that rounds every request as cupy's PinnedMemoryPool.malloc does (up to 512 bytes, then
to the next power of two: cupy/cuda/pinned_memory.pyx; ``is_pinned`` tells them from
pageable arrays), and refused with cupy's
CUDARuntimeError once more than ``STRICT_CUPY_PINNED_LIMIT`` bytes (if set) would be
pinned at once, as cudaHostAlloc fails past a locked-memory limit. ``pinned_held()``: the
bytes the live pinned arrays hold, as the pool counts them."""

import os
import weakref

import numpy as np

_held: dict[int, int] = {}


def _pool_bytes(nbytes: int) -> int:
    if nbytes == 0:
        return 0
    units = ((nbytes + 511) // 512) * 512
    size = 1
    while size < units:
        size *= 2
    return size


def pinned_held() -> int:
    """Bytes the live pinned arrays take from the pool."""
    return sum(_held.values())


def is_pinned(array) -> bool:
    """Whether ``array`` lies in memory this pool pinned (it or an array it views)."""
    while array is not None:
        if id(array) in _held:
            return True
        array = getattr(array, "base", None)
    return False


def _pinned(shape, dtype, order, make):
    from cupy.cuda import runtime

    nbytes = _pool_bytes(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
    limit = os.environ.get("STRICT_CUPY_PINNED_LIMIT")
    if limit is not None and pinned_held() + nbytes > int(limit):
        raise runtime.CUDARuntimeError("cudaErrorMemoryAllocation: out of memory")
    array = make(shape, dtype, order=order)
    _held[id(array)] = nbytes
    weakref.finalize(array, _held.pop, id(array), None)
    return array


def empty_pinned(shape, dtype=float, order="C"):
    return _pinned(shape, dtype, order, np.empty)


def zeros_pinned(shape, dtype=float, order="C"):
    return _pinned(shape, dtype, order, np.zeros)
