"""Allreduce algorithms over point-to-point messages (Thakur, Rabenseifner and Gropp,
IJHPCA 2005; the costs below are theirs, n in bytes, p processes, lg = ceil(log2)).

- ring: reduce-scatter then allgather around a ring, 2(p-1) a + 2(p-1)/p n b +
  (p-1)/p n g. Bandwidth-optimal (Patarasuk and Yuan 2009). Incoming blocks are reduced
  segment by segment (``seg`` bytes) as they land. Commutative ops.
- recursive_doubling: lg p (a + n b + n g); non-power-of-two p folds the first 2r ranks
  pairwise (r = p - 2^floor(lg p)) before and unfolds after, as MPICH does. Keeps rank
  order, so any op.
- rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather,
  2 lg p a + 2(p-1)/p n b + (p-1)/p n g, with the same fold. Commutative ops.
- reduce_bcast: binomial reduce to rank 0 then binomial bcast,
  2 lg p (a + n b) + lg p n g.

Each cost also counts the copy of the input into the output that an out-of-place call
(the benchmarks' default) starts with, n b_intra: a local memory copy, as large as one
whole-vector message; the textbook formulas assume in-place buffers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from collectives.common import (
    TAG_FOLD,
    Machine,
    Scratch,
    block_bounds,
    lg,
    private_comm,
    reduce_into_ordered,
    start_in_place,
)
from collectives.ops import ReduceOp
from collectives.powers import largest_power_of_two_at_most
from collectives.primitives import (
    binomial_bcast,
    binomial_reduce,
    identity,
    recursive_doubling_allgather,
    recursive_halving,
    ring_allgather,
    ring_reduce_scatter,
)
from collectives.registry import COMMUTATIVE_OP, Counterpart, Split, largest_block, register

if TYPE_CHECKING:
    from mpi4py import MPI


def _copy_in(m: Machine, n: float) -> float:
    """start_in_place: the input copied into the output, a local memory copy."""
    return n * m.intra.beta


def _ring_cost(m: Machine, p: int, n: float, seg: int = 0) -> float:
    link = m.flat(p)
    steps = 2 * (p - 1) * link.alpha + (p - 1) / p * n * (2 * link.beta + link.gamma)
    return steps + _copy_in(m, n)


def _recursive_doubling_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    folds = 2 if p & (p - 1) else 0  # fold in and out for non-power-of-two p
    steps = (lg(p) + folds) * (link.alpha + n * link.beta) + (lg(p) + folds / 2) * n * link.gamma
    return steps + _copy_in(m, n)


def _rabenseifner_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    folds = 2 if p & (p - 1) else 0
    return (
        (2 * lg(p) + folds) * link.alpha
        + (2 * (p - 1) / p + folds) * n * link.beta
        + ((p - 1) / p + folds / 2) * n * link.gamma
        + _copy_in(m, n)
    )


def _reduce_bcast_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return 2 * lg(p) * (link.alpha + n * link.beta) + lg(p) * n * link.gamma + _copy_in(m, n)


@register(
    "allreduce",
    "ring",
    summary="reduce-scatter + allgather around a ring, segmented",
    requires=(COMMUTATIVE_OP,),
    grid={"seg": (0, 256 * 1024, 1024 * 1024)},
    split=Split("seg", largest_block, zero_means_whole=True),
    cost=_ring_cost,
    equivalents={
        "openmpi": Counterpart("ring", id=4),
        # MPICH's ring sends whole blocks.
        "mpich": Counterpart("MPIR_Allreduce_intra_ring", params={"seg": 0}),
    },
)
def ring(comm: MPI.Comm, seg: int = 256 * 1024):
    """Bind the segmented ring allreduce (``seg`` bytes per segment, 0 = whole blocks)."""
    comm = private_comm(comm)
    rank, p, scratch = comm.Get_rank(), comm.Get_size(), Scratch()

    def call(send, recv, op, root):
        buf = start_in_place(send, recv)
        if p == 1:
            return
        bounds = block_bounds(len(buf), p)
        tmp = scratch.get("block", bounds[1], buf)  # the first block is the largest
        owned = ring_reduce_scatter(
            comm, op, buf, tmp, bounds, rank, identity, seg=seg // buf.itemsize
        )
        ring_allgather(comm, buf, bounds, rank, identity, owned)

    return call


class _Fold:
    """Reduces p ranks to the largest power of two p' <= p: of the first 2r ranks
    (r = p - p'), each even rank hands its data to the odd rank above it and sits out."""

    def __init__(self, rank: int, p: int) -> None:
        self.rank, self.pof2 = rank, largest_power_of_two_at_most(p)
        self.rem = p - self.pof2
        if rank < 2 * self.rem:
            self.newrank = rank // 2 if rank % 2 else -1
        else:
            self.newrank = rank - self.rem

    def rank_of(self, newrank: int) -> int:
        """Real rank of a position among the p' remaining ranks."""
        return newrank * 2 + 1 if newrank < self.rem else newrank + self.rem

    def fold_in(self, comm: MPI.Comm, op: ReduceOp, buf: Any, tmp: Any) -> None:
        """Even ranks of the first 2r send their data up; odd ones combine it first."""
        if self.rank >= 2 * self.rem:
            return
        if self.newrank < 0:
            comm.Send(buf, self.rank + 1, TAG_FOLD)
        else:
            incoming = tmp[: len(buf)]
            comm.Recv(incoming, self.rank - 1, TAG_FOLD)
            reduce_into_ordered(op, buf, incoming, other_is_lower=True)

    def fold_out(self, comm: MPI.Comm, buf: Any) -> None:
        """Odd ranks of the first 2r hand the result back down."""
        if self.rank >= 2 * self.rem:
            return
        if self.newrank < 0:
            comm.Recv(buf, self.rank + 1, TAG_FOLD)
        else:
            comm.Send(buf, self.rank - 1, TAG_FOLD)


def _folded(comm: MPI.Comm, among_power_of_two) -> Any:
    """An allreduce that folds p down to a power of two, runs
    ``among_power_of_two(comm, op, buf, tmp, fold)`` on the remaining ranks, and unfolds."""
    comm = private_comm(comm)
    fold, scratch = _Fold(comm.Get_rank(), comm.Get_size()), Scratch()

    def call(send, recv, op, root):
        buf = start_in_place(send, recv)
        tmp = scratch.get("vector", len(buf), buf)
        fold.fold_in(comm, op, buf, tmp)
        if fold.newrank >= 0:
            among_power_of_two(comm, op, buf, tmp, fold)
        fold.fold_out(comm, buf)

    return call


def _exchange_whole_vectors(comm: MPI.Comm, op: ReduceOp, buf: Any, tmp: Any, fold: _Fold):
    """Recursive doubling: swap the whole vector with partners at distance 1, 2, 4, ..."""
    mask = 1
    while mask < fold.pof2:
        partner = fold.newrank ^ mask
        peer = fold.rank_of(partner)
        comm.Sendrecv(buf, peer, 0, tmp, peer, 0)
        reduce_into_ordered(op, buf, tmp, other_is_lower=partner < fold.newrank)
        mask <<= 1


def _halve_then_double(comm: MPI.Comm, op: ReduceOp, buf: Any, tmp: Any, fold: _Fold):
    """Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling allgather."""
    bounds = block_bounds(len(buf), fold.pof2)
    recursive_halving(comm, op, buf, tmp, bounds, fold.newrank, fold.rank_of)
    recursive_doubling_allgather(comm, buf, bounds, fold.newrank, fold.rank_of)


@register(
    "allreduce",
    "recursive_doubling",
    summary="exchange whole vectors with partners at distance 1, 2, 4, ...",
    cost=_recursive_doubling_cost,
    equivalents={
        "openmpi": Counterpart("recursive_doubling", id=3),
        "mpich": Counterpart("MPIR_Allreduce_intra_recursive_doubling"),
    },
)
def recursive_doubling(comm: MPI.Comm):
    """Bind the recursive-doubling allreduce (non-power-of-two p folded)."""
    return _folded(comm, _exchange_whole_vectors)


@register(
    "allreduce",
    "rabenseifner",
    summary="recursive-halving reduce-scatter + recursive-doubling allgather",
    requires=(COMMUTATIVE_OP,),
    cost=_rabenseifner_cost,
    equivalents={
        "openmpi": Counterpart("rabenseifner", id=6),
        "mpich": Counterpart("MPIR_Allreduce_intra_reduce_scatter_allgather"),
    },
)
def rabenseifner(comm: MPI.Comm):
    """Bind Rabenseifner's allreduce (non-power-of-two p folded)."""
    return _folded(comm, _halve_then_double)


@register(
    "allreduce",
    "reduce_bcast",
    summary="binomial reduce to rank 0, binomial bcast",
    cost=_reduce_bcast_cost,
    equivalents={
        # Open MPI's reduce followed by bcast.
        "openmpi": Counterpart("nonoverlapping", id=2),
        # MPICH's one-node allreduce: a reduce up a tree of shared cells, then a bcast.
        "mpich_posix": Counterpart("release_gather"),
    },
)
def reduce_bcast(comm: MPI.Comm):
    """Bind binomial reduce + binomial bcast (rank order kept: rank 0 is the root)."""
    comm = private_comm(comm)
    rank, p, scratch = comm.Get_rank(), comm.Get_size(), Scratch()

    def call(send, recv, op, root):
        buf = start_in_place(send, recv)
        binomial_reduce(comm, op, buf, scratch.get("vector", len(buf), buf), rank, p, identity)
        binomial_bcast(comm, buf, rank, p, identity)

    return call
