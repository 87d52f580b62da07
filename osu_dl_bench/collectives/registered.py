"""Registered host buffers (buffer kind ``cpu-registered``): numpy arrays in memory that
the other ranks of the node can map into their own address space.

MPI's buffers are private memory: a peer reaches them only through a copy (MPI's own, a
shared window, or the kernel's process_vm_readv in collectives.cma). Memory allocated
here lives in an anonymous memory file (memfd_create), which a peer maps by opening
/proc/PID/fd/FD; the cma algorithms then read and reduce the peers' blocks with plain
loads, no system call and no intermediate copy. This is what NCCL's registered user
buffers (ncclMemAlloc + ncclCommRegister) and XPMEM-based MPI paths do: the application
allocates its communication buffers (a trainer's gradient buckets) from the library.

A region is released (its file closed) when the last array using it is freed; a peer that
still maps it keeps the pages until its own mapping is dropped. Sources: memfd_create(2),
proc(5) (/proc/PID/fd), mmap(2).
"""

from __future__ import annotations

import itertools
import mmap
import os
import sys
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

DEVICE = "cpu-registered"
# Mapped peer regions kept per process; older ones are dropped (unmapped once unused).
PEER_MAP_LIMIT = 64
_serials = itertools.count(1)


@dataclass(frozen=True)
class Region:
    """One allocation: its memory file, a serial (fds are reused), its address and size."""

    fd: int
    serial: int
    base: int
    nbytes: int


_REGIONS: dict[int, Region] = {}


def unavailable_reason() -> str | None:
    """None if registered buffers can be allocated and mapped here, else why not."""
    if not sys.platform.startswith("linux"):
        return f"needs Linux (memfd_create and /proc/PID/fd), this is {sys.platform}"
    if not hasattr(os, "memfd_create"):
        return "this Python has no os.memfd_create"
    if not os.path.isdir("/proc/self/fd"):
        return "/proc is not mounted"
    return None


def _release(serial: int) -> None:
    region = _REGIONS.pop(serial, None)
    if region is not None:
        os.close(region.fd)


def empty(count: int, dtype: Any = np.float64) -> np.ndarray:
    """A one-dimensional array of ``count`` elements in registered memory."""
    dtype = np.dtype(dtype)
    if isinstance(count, tuple):  # xp.zeros((n,), dtype) as numpy accepts
        (count,) = count
    nbytes = max(int(count) * dtype.itemsize, 1)
    fd = os.memfd_create("osu-dl-bench", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, nbytes)
        memory = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError:
        os.close(fd)
        raise
    serial = next(_serials)
    raw = np.frombuffer(memory, np.uint8)
    _REGIONS[serial] = Region(fd, serial, raw.ctypes.data, nbytes)
    weakref.finalize(memory, _release, serial)
    return raw[: int(count) * dtype.itemsize].view(dtype)


def zeros(count: int, dtype: Any = np.float64) -> np.ndarray:
    """Like numpy.zeros, in registered memory (pages touched now, not at the first call)."""
    array = empty(count, dtype)
    array.fill(0)
    return array


def region_of(array: np.ndarray) -> tuple[Region, int] | None:
    """The registered region holding all of ``array`` and its byte offset there, or None."""
    if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
        return None
    start = array.ctypes.data
    for region in _REGIONS.values():
        if region.base <= start and start + array.nbytes <= region.base + region.nbytes:
            return region, start - region.base
    return None


class _HostRegistered:
    """numpy, allocating in registered memory: the array module of ``cpu-registered``."""

    zeros = staticmethod(zeros)
    empty = staticmethod(empty)

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


ARRAYS = _HostRegistered()


class PeerMaps:
    """Peers' registered regions mapped into this process, by (pid, fd, serial)."""

    def __init__(self, limit: int = PEER_MAP_LIMIT) -> None:
        self._maps: OrderedDict[tuple[int, int, int], np.ndarray | None] = OrderedDict()
        self._limit = limit

    def bytes_of(self, pid: int, fd: int, serial: int) -> np.ndarray | None:
        """The peer's region as bytes, or None if it cannot be mapped (then the caller
        copies through the kernel instead)."""
        key = (pid, fd, serial)
        if key in self._maps:
            self._maps.move_to_end(key)
            return self._maps[key]
        mapped = _map_peer(pid, fd)
        self._maps[key] = mapped
        if len(self._maps) > self._limit:
            # Dropped, not closed: a view made by a call still running keeps it mapped.
            self._maps.popitem(last=False)
        return mapped


def _map_peer(pid: int, fd: int) -> np.ndarray | None:
    try:
        handle = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
    except OSError:
        return None
    try:
        size = os.fstat(handle).st_size
        memory = mmap.mmap(handle, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return None
    finally:
        os.close(handle)
    return np.frombuffer(memory, np.uint8)
