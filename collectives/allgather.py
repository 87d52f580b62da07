"""Allgather algorithms (n = bytes of the whole result, p processes, lg = ceil(log2)):

- ring: (p-1) a + (p-1)/p n b; any p.
- recursive_doubling: lg p a + (p-1)/p n b; power-of-two p.
- bruck: lg p a + (p-1)/p n b plus a local rotation; any p (Bruck et al. 1997).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collectives.common import (
    Machine,
    Scratch,
    copy_into,
    equal_blocks,
    lg,
    private_comm,
)
from collectives.device import device_ready
from collectives.primitives import (
    bruck_allgather,
    identity,
    recursive_doubling_allgather,
    ring_allgather,
)
from collectives.registry import POWER_OF_TWO, Counterpart, register

if TYPE_CHECKING:
    from mpi4py import MPI


def _ring_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return (p - 1) * link.alpha + (p - 1) / p * n * link.beta


def _log_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return lg(p) * link.alpha + (p - 1) / p * n * link.beta


def _in_blocks(schedule, comm: MPI.Comm):
    """An allgather whose schedule works on p equal blocks of the receive buffer."""
    comm = private_comm(comm)
    rank, p = comm.Get_rank(), comm.Get_size()

    def call(send, recv, op, root):
        block = len(recv) // p
        if send is not None:
            copy_into(recv[rank * block : (rank + 1) * block], send)
        schedule(comm, recv, equal_blocks(block, p), rank)

    return call


@register(
    "allgather",
    "ring",
    summary="ring, p-1 steps",
    cost=_ring_cost,
    equivalents={"mpich": Counterpart("MPIR_Allgather_intra_ring")},
)
def ring(comm: MPI.Comm):
    """Bind the ring allgather."""
    return _in_blocks(
        lambda c, buf, bounds, rank: ring_allgather(c, buf, bounds, rank, identity, rank), comm
    )


@register(
    "allgather",
    "recursive_doubling",
    summary="recursive doubling, lg p steps",
    requires=(POWER_OF_TWO,),
    cost=_log_cost,
    equivalents={"mpich": Counterpart("MPIR_Allgather_intra_recursive_doubling")},
)
def recursive_doubling(comm: MPI.Comm):
    """Bind the recursive-doubling allgather."""
    return _in_blocks(
        lambda c, buf, bounds, rank: recursive_doubling_allgather(c, buf, bounds, rank, identity),
        comm,
    )


@register(
    "allgather",
    "bruck",
    summary="Bruck's algorithm, lg p steps for any p",
    cost=_log_cost,
    equivalents={"mpich": Counterpart("MPIR_Allgather_intra_brucks")},
)
def bruck(comm: MPI.Comm):
    """Bind Bruck's allgather."""
    comm = private_comm(comm)
    rank, p, scratch = comm.Get_rank(), comm.Get_size(), Scratch()

    def call(send, recv, op, root):
        block = len(recv) // p
        work = scratch.get("work", block * p, recv)
        copy_into(work[:block], recv[rank * block : (rank + 1) * block] if send is None else send)
        # work then holds the blocks of ranks rank, rank+1, ... in that order.
        bruck_allgather(comm, work, block, rank, p, identity)
        split = (p - rank) * block
        recv[rank * block :] = work[:split]
        recv[: rank * block] = work[split:]
        device_ready(recv)  # the next call's MPI traffic may read or overwrite recv

    return call
