"""Reduce-scatter (MPI_Reduce_scatter_block) algorithms (n = bytes of the whole input):

- ring: (p-1) a + (p-1)/p n (b + g); commutative ops; any p.
- recursive_halving: lg p a + (p-1)/p n (b + g); commutative ops; power-of-two p.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collectives.common import Machine, Scratch, copy_into, equal_blocks, lg, private_comm
from collectives.primitives import identity, recursive_halving, ring_reduce_scatter
from collectives.registry import COMMUTATIVE_OP, POWER_OF_TWO, Counterpart, register

if TYPE_CHECKING:
    from mpi4py import MPI


def _ring_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return (p - 1) * link.alpha + (p - 1) / p * n * (link.beta + link.gamma)


def _halving_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return lg(p) * link.alpha + (p - 1) / p * n * (link.beta + link.gamma)


def _in_blocks(schedule, comm: MPI.Comm):
    """Run ``schedule`` on a working copy of the p-block input; keep this rank's block."""
    comm = private_comm(comm)
    rank, p, scratch = comm.Get_rank(), comm.Get_size(), Scratch()

    def call(send, recv, op, root):
        if send is None:  # in place: recv holds the whole input, the result goes first
            work, block = recv, len(recv) // p
        else:
            block = len(recv)
            work = scratch.get("work", block * p, send)
            copy_into(work, send)  # the caller's send buffer must not change
        # Recursive halving receives up to half the input at once; the ring one block.
        tmp = scratch.get("incoming", block * max(1, p // 2), work)
        schedule(comm, op, work, tmp, equal_blocks(block, p), rank)
        if work is not recv or rank:
            copy_into(recv[:block], work[rank * block : (rank + 1) * block])

    return call


@register(
    "reduce_scatter",
    "ring",
    summary="ring, p-1 steps",
    requires=(COMMUTATIVE_OP,),
    cost=_ring_cost,
    # MPICH's pairwise exchange: the ring's p-1 steps and volume, with the partner at
    # distance i in step i.
    equivalents={"mpich": Counterpart("MPIR_Reduce_scatter_block_intra_pairwise")},
)
def ring(comm: MPI.Comm):
    """Bind the ring reduce-scatter."""
    return _in_blocks(
        lambda c, op, buf, tmp, bounds, rank: ring_reduce_scatter(
            c, op, buf, tmp, bounds, rank, identity, shift=-1
        ),
        comm,
    )


@register(
    "reduce_scatter",
    "recursive_halving",
    summary="recursive halving, lg p steps",
    requires=(COMMUTATIVE_OP, POWER_OF_TWO),
    cost=_halving_cost,
    equivalents={"mpich": Counterpart("MPIR_Reduce_scatter_block_intra_recursive_halving")},
)
def recursive_halving_(comm: MPI.Comm):
    """Bind the recursive-halving reduce-scatter."""
    return _in_blocks(
        lambda c, op, buf, tmp, bounds, rank: recursive_halving(
            c, op, buf, tmp, bounds, rank, identity
        ),
        comm,
    )
