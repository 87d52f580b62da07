"""Helpers shared by the algorithm implementations: private communicators, scratch
buffers, block partitions, in-place handling and the pieces of the cost model.

Algorithms use only mpi4py's buffer calls (Send/Recv/Sendrecv/Isend/Irecv) on numpy or
cupy arrays, never the pickle-based lowercase ones. Every local operation on the buffers
(a copy, a reduction) goes through a helper here that ends with
``collectives.device.device_ready``: on cupy the kernel it launched is finished before MPI
reads or overwrites that memory (and before the call returns).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives.device import device_ready
from collectives.ops import ReduceOp

# Re-exported: their home was here, and users may import them from here.
from collectives.powers import is_power_of_two, largest_power_of_two_at_most  # noqa: F401

if TYPE_CHECKING:
    from mpi4py import MPI

# Tags of the algorithms' point-to-point traffic. They only need to differ between phases
# of one algorithm: every algorithm runs on its own duplicate communicator.
TAG_DATA = 11
TAG_PHASE2 = 12
TAG_FOLD = 13


def private_comm(comm: MPI.Comm) -> MPI.Comm:
    """A duplicate of ``comm`` for one algorithm's own traffic (made once, at bind time), so
    its messages can never match the caller's."""
    return comm.Dup()


class Scratch:
    """Scratch arrays reused across calls: allocated once per (name, shape, dtype)."""

    def __init__(self) -> None:
        self._arrays: dict[tuple, Any] = {}

    def get(self, name: str, count: int, like: Any) -> Any:
        """A 1-D array of ``count`` elements with ``like``'s dtype and array module."""
        key = (name, count, like.dtype, type(like))
        array = self._arrays.get(key)
        if array is None:
            xp = _array_module_of(like)
            array = xp.empty(count, like.dtype)
            self._arrays[key] = array
        return array


def _array_module_of(array: Any):
    if isinstance(array, np.ndarray):
        return np
    import cupy  # only reached with cupy arrays

    return cupy


@lru_cache(maxsize=256)
def block_bounds(n: int, parts: int) -> tuple[int, ...]:
    """Offsets of ``parts`` near-equal blocks of ``n`` elements: block i is
    ``[b[i], b[i+1])``; the first ``n % parts`` blocks hold one element more.
    Cached: algorithms ask for the same split on every call."""
    base, extra = divmod(n, parts)
    return tuple(i * base + min(i, extra) for i in range(parts + 1))


@lru_cache(maxsize=256)
def equal_blocks(block: int, parts: int) -> tuple[int, ...]:
    """Offsets of ``parts`` blocks of exactly ``block`` elements each."""
    return tuple(i * block for i in range(parts + 1))


def start_in_place(send: Any, recv: Any) -> Any:
    """Make ``recv`` hold this rank's input (copying from ``send`` unless in place)."""
    if send is not None:
        copy_into(recv, send)
    return recv


def copy_into(dst: Any, src: Any) -> None:
    """``dst[...] = src``, finished before MPI touches either (a kernel on cupy)."""
    dst[...] = src
    device_ready(dst)


def reduce_into(op: ReduceOp, target: Any, other: Any) -> None:
    """``target = op(target, other)`` in place, with the op's ufunc (no Python loop)."""
    op.ufunc(target, other, out=target)
    device_ready(target)


def reduce_into_ordered(op: ReduceOp, target: Any, other: Any, other_is_lower: bool) -> None:
    """Like ``reduce_into`` but keeps rank order for a non-commutative op:
    ``target = op(other, target)`` when ``other`` comes from lower ranks."""
    if other_is_lower and not op.commutative:
        op.ufunc(other, target, out=target)
    else:
        op.ufunc(target, other, out=target)
    device_ready(target)


# --- cost model (Thakur, Rabenseifner and Gropp, IJHPCA 2005) ---


@dataclass(frozen=True)
class LinkCost:
    """alpha: seconds per message; beta: seconds per byte; gamma: reduction s per byte."""

    alpha: float
    beta: float
    gamma: float


@dataclass(frozen=True)
class Machine:
    """Costs inside a node and between nodes, and the ranks per node."""

    intra: LinkCost
    inter: LinkCost
    ppn: int = 1

    def flat(self, p: int) -> LinkCost:
        """The link a flat (topology-unaware) algorithm is limited by on p ranks."""
        return self.inter if p > self.ppn else self.intra


def lg(p: int) -> float:
    """ceil(log2 p), the number of rounds of a tree or recursive-doubling algorithm."""
    return float((max(p, 1) - 1).bit_length())
