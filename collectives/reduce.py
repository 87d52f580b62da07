"""Reduce: binomial tree, lg p (a + n b + n g) (Thakur, Rabenseifner and Gropp 2005).
Commutative ops: with a root other than rank 0 the tree combines out of rank order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collectives.common import Machine, Scratch, copy_into, lg, private_comm
from collectives.primitives import binomial_reduce, relative_to
from collectives.registry import COMMUTATIVE_OP, Counterpart, register

if TYPE_CHECKING:
    from mpi4py import MPI


def _binomial_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return lg(p) * (link.alpha + n * link.beta + n * link.gamma)


@register(
    "reduce",
    "binomial",
    summary="binomial tree",
    requires=(COMMUTATIVE_OP,),
    cost=_binomial_cost,
    equivalents={"mpich": Counterpart("MPIR_Reduce_intra_binomial")},
)
def binomial(comm: MPI.Comm):
    """Bind the binomial-tree reduce."""
    comm = private_comm(comm)
    rank, p, scratch = comm.Get_rank(), comm.Get_size(), Scratch()

    def call(send, recv, op, root):
        source = recv if send is None else send
        # The root accumulates in its receive buffer; others in scratch, since their
        # send buffer is the caller's and must not change.
        acc = recv if rank == root else scratch.get("acc", len(source), source)
        if acc is not source:
            copy_into(acc, source)
        binomial_reduce(
            comm,
            op,
            acc,
            scratch.get("incoming", len(source), source),
            (rank - root) % p,
            p,
            relative_to(root, p),
        )

    return call
