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
still maps it keeps the pages until its own mapping is dropped. Its size is sealed
(F_SEAL_SHRINK, F_SEAL_GROW): a peer that opened the file cannot truncate it under the
owner, whose next load would die with SIGBUS. Peers map it read-only unless they must
write into it (PeerMaps.bytes_of). Sources: memfd_create(2), fcntl(2) (file seals), proc(5)
(/proc/PID/fd), mmap(2).
"""

from __future__ import annotations

import fcntl
import itertools
import math
import mmap
import os
import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

DEVICE = "cpu-registered"
# Peers' memory files kept mapped per binding; the least recently used are dropped
# (unmapped once unused). A trainer needs buckets x (p - 1) of them.
PEER_MAP_LIMIT = 256
_serials = itertools.count(1)
# Regions are added by allocating threads and removed by finalisers (any thread).
_LOCK = threading.Lock()


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
    if not hasattr(fcntl, "F_ADD_SEALS"):
        return "this Python has no fcntl.F_ADD_SEALS (file seals)"
    if not os.path.isdir("/proc/self/fd"):
        return "/proc is not mounted"
    return None


def _release(serial: int) -> None:
    with _LOCK:
        region = _REGIONS.pop(serial, None)
    if region is not None:
        os.close(region.fd)


def _element_count(shape: Any) -> int:
    """Elements of an int or tuple shape, as numpy.empty takes it; a ValueError else."""
    dims = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
    if not all(isinstance(d, int | np.integer) and d >= 0 for d in dims):
        raise ValueError(f"registered arrays need non-negative integer sizes, got {shape!r}")
    return math.prod(int(d) for d in dims)


def empty(shape: Any, dtype: Any = np.float64) -> np.ndarray:
    """An array of ``shape`` (an int or a tuple) in registered memory."""
    dtype = np.dtype(dtype)
    count = _element_count(shape)
    nbytes = max(count * dtype.itemsize, 1)
    fd = os.memfd_create("osu-dl-bench", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, nbytes)
        # Peers open this file through /proc: none may change its size under our mapping.
        seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        memory = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError:
        os.close(fd)
        raise
    raw = np.frombuffer(memory, np.uint8)
    with _LOCK:
        serial = next(_serials)
        _REGIONS[serial] = Region(fd, serial, raw.ctypes.data, nbytes)
    weakref.finalize(memory, _release, serial)
    shaped = shape if isinstance(shape, tuple | list) else (count,)
    return raw[: count * dtype.itemsize].view(dtype).reshape(shaped)


def zeros(shape: Any, dtype: Any = np.float64) -> np.ndarray:
    """Like numpy.zeros, in registered memory (pages touched now, not at the first call)."""
    array = empty(shape, dtype)
    array.fill(0)
    return array


def ones(shape: Any, dtype: Any = np.float64) -> np.ndarray:
    """Like numpy.ones, in registered memory."""
    array = empty(shape, dtype)
    array.fill(1)
    return array


def region_of(array: np.ndarray) -> tuple[Region, int] | None:
    """The registered region holding all of ``array`` and its byte offset there, or None."""
    if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
        return None
    start = array.ctypes.data
    with _LOCK:
        regions = list(_REGIONS.values())
    for region in regions:
        if region.base <= start and start + array.nbytes <= region.base + region.nbytes:
            return region, start - region.base
    return None


class _HostRegistered:
    """numpy, allocating in registered memory: the array module of ``cpu-registered``."""

    zeros = staticmethod(zeros)
    empty = staticmethod(empty)
    ones = staticmethod(ones)

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


ARRAYS = _HostRegistered()


class PeerMaps:
    """Peers' registered regions mapped into this process, one per (pid, fd, writable): a
    new serial on the same descriptor (the peer freed a region and reused the number)
    replaces the old mapping, so freed regions are not kept alive here."""

    def __init__(self, limit: int = PEER_MAP_LIMIT) -> None:
        # (pid, fd, writable) -> (serial, mapping or None if it could not be mapped)
        self._maps: OrderedDict[tuple, tuple[int, np.ndarray | None]] = OrderedDict()
        self._limit = limit
        self.last_error: str | None = None  # why the latest mapping failed, for messages

    def bytes_of(self, pid: int, fd: int, serial: int, writable: bool = False) -> np.ndarray | None:
        """The peer's region as bytes, read-only unless ``writable``, or None if it cannot
        be mapped (then the caller copies through the kernel instead)."""
        key = (pid, fd, writable)
        known = self._maps.get(key)
        if known is not None and known[0] == serial:
            self._maps.move_to_end(key)
            return known[1]
        try:
            mapped = _map_peer(pid, fd, writable)
        except (OSError, ValueError) as exc:
            mapped, self.last_error = None, f"/proc/{pid}/fd/{fd}: {exc}"
        # Replaced or dropped, not closed: a view made by a running call keeps it mapped.
        self._maps[key] = (serial, mapped)
        self._maps.move_to_end(key)
        if len(self._maps) > self._limit:
            self._maps.popitem(last=False)
        return mapped


def _map_peer(pid: int, fd: int, writable: bool) -> np.ndarray:
    """The peer's memory file mapped here, as bytes, read-only (a store raises) unless
    ``writable`` (OSError or ValueError if it cannot be mapped)."""
    flags, prot = os.O_RDONLY, mmap.PROT_READ
    if writable:
        flags, prot = os.O_RDWR, mmap.PROT_READ | mmap.PROT_WRITE
    handle = os.open(f"/proc/{pid}/fd/{fd}", flags)
    try:
        size = os.fstat(handle).st_size
        memory = mmap.mmap(handle, size, mmap.MAP_SHARED, prot)
    finally:
        os.close(handle)
    return np.frombuffer(memory, np.uint8)
