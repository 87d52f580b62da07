"""Collective libraries other than MPI, on the same registry: ``gloo`` (torch.distributed's
Gloo, host memory) and ``nccl`` (cupy.cuda.nccl, GPU memory).

Each module registers its algorithms only where its library (and device) is present, and
otherwise records why in ``registry.UNAVAILABLE_BACKENDS`` for ``osu-dl-bench list``.
Neither imports its library when the package is imported (torch alone takes seconds, and
every ``osu-dl-bench`` start imports the registry): presence is checked with
``importlib.util.find_spec`` and the library is imported when an algorithm is bound.

Shared here: the per-communicator cache of a library's own communicator, and the byte
broadcast that carries rendezvous data (an address, an NCCL unique id) over MPI.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives import mpi

if TYPE_CHECKING:
    from mpi4py import MPI

_KEYVALS: dict[str, int] = {}
# (communicator, keyval) of every cached object still alive, in creation order.
_LIVE: list[tuple[MPI.Comm, int]] = []


def _release(comm: MPI.Comm, keyval: int, value: Any) -> None:
    # Delete callback (comm.Free, or _release_all at exit). A rank that returns from a
    # collective may still have peers inside it; tearing its connections down then makes
    # Gloo abort the peers ("terminate called without an active exception", seen in about
    # half of the runs that exit right after a gloo call). So all ranks first meet here.
    comm.Barrier()
    _LIVE[:] = [(c, k) for c, k in _LIVE if not (k == keyval and c == comm)]


@atexit.register
def _release_all() -> None:
    """Release every cached object before MPI_Finalize (Python's atexit runs first).

    Last created first; every rank created the objects of a communicator in the same order,
    since creation is collective, so the barriers of _release match up."""
    # Nothing cached means nothing to release, and asking MPI would start it (collectives.mpi).
    if not _LIVE or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    for comm, keyval in reversed(list(_LIVE)):
        comm.Delete_attr(keyval)


def cached_on_comm(comm: MPI.Comm, name: str, create: Callable[[MPI.Comm], Any]) -> Any:
    """``create(comm)`` on first use, then the same object for every later bind on ``comm``.

    Kept as an MPI attribute of ``comm``: it is released when the communicator is freed (or
    at exit), after a barrier, and a duplicate of ``comm`` gets its own. ``create`` must be
    collective over ``comm``; every rank hits or misses the cache together since they bind
    on the same communicator.
    """
    if name not in _KEYVALS:
        _KEYVALS[name] = mpi.Comm.Create_keyval(delete_fn=_release)
    keyval = _KEYVALS[name]
    value = comm.Get_attr(keyval)
    if value is None:
        value = create(comm)
        comm.Set_attr(keyval, value)
        _LIVE.append((comm, keyval))
    return value


def bcast_bytes(comm: MPI.Comm, data: bytes | None, root: int = 0) -> bytes:
    """Broadcast ``data`` (significant at ``root`` only) with buffer calls, no pickle."""
    is_root = comm.Get_rank() == root
    length = np.array([len(data) if is_root else 0], dtype=np.int64)
    comm.Bcast(length, root)
    buf = np.frombuffer(data, np.uint8).copy() if is_root else np.empty(length[0], np.uint8)
    comm.Bcast(buf, root)
    return buf.tobytes()
