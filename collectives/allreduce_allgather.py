"""Allreduce ``allgather_reduce``: every rank gathers all p input vectors with Bruck's
allgather, then reduces them locally in rank order. Open MPI's coll/tuned allreduce
algorithm 7, which its fixed decision picks for small and medium messages on 3 to 64 ranks
(ompi/mca/coll/tuned/coll_tuned_decision_fixed.c).

Cost (n bytes, p processes, lg = ceil(log2)): lg p a + (p-1) n b + (p-1) n g, plus the copy
of the input into the gather buffer, n b_intra. The fewest message steps of the allreduces
here for any p (recursive doubling adds two fold steps where p is not a power of two) for
p times their volume: an algorithm for small messages. Any op: every rank reduces the same
vectors in the same (rank) order, so all ranks hold bit-identical results. Scratch: p n
bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collectives.common import (
    Machine,
    Scratch,
    copy_into,
    lg,
    private_comm,
    start_in_place,
)
from collectives.device import device_ready
from collectives.primitives import bruck_allgather, identity
from collectives.registry import Counterpart, register

if TYPE_CHECKING:
    from mpi4py import MPI


def _cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return lg(p) * link.alpha + (p - 1) * n * (link.beta + link.gamma) + n * m.intra.beta


@register(
    "allreduce",
    "allgather_reduce",
    summary="Bruck allgather of every vector, then a local reduce in rank order",
    cost=_cost,
    equivalents={"openmpi": Counterpart("allgather_reduce", id=7)},
)
def allgather_reduce(comm: MPI.Comm):
    """Bind the allgather + local reduce allreduce."""
    comm = private_comm(comm)
    rank, p, scratch = comm.Get_rank(), comm.Get_size(), Scratch()

    def call(send, recv, op, root):
        if p == 1:
            start_in_place(send, recv)
            return
        n = len(recv)
        vectors = scratch.get("vectors", n * p, recv)
        copy_into(vectors[:n], recv if send is None else send)
        # Block j now holds the vector of rank (rank + j) % p.
        bruck_allgather(comm, vectors, n, rank, p, identity)
        in_rank_order = [vectors[(r - rank) % p * n :][:n] for r in range(p)]
        op.ufunc(in_rank_order[0], in_rank_order[1], out=recv)
        for vector in in_rank_order[2:]:
            op.ufunc(recv, vector, out=recv)
        device_ready(recv)  # the next call's MPI traffic may read or overwrite recv

    return call
