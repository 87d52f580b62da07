"""Broadcast algorithms over point-to-point messages (costs from Thakur, Rabenseifner and
Gropp 2005 and Awan et al.; n bytes, p processes, k segments, lg = ceil(log2)).

- binomial: lg p (a + n b). Best for small messages.
- chain: the DL-aware pipelined chain of Awan et al. (model propagation beating
  NCCL-based broadcasts for large messages): the buffer travels root -> root+1 -> ...
  in segments of ``seg`` bytes, each rank forwarding a segment while the next arrives,
  (p - 1 + k - 1)(a + n/k b).
- scatter_ring_allgather (van de Geijn): binomial scatter then ring allgather,
  (lg p + p - 1) a + 2 (p-1)/p n b.
- scatter_rd_allgather: binomial scatter then recursive-doubling allgather,
  2 lg p a + 2 (p-1)/p n b; power-of-two p.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collectives import mpi
from collectives.common import TAG_DATA, Machine, block_bounds, lg, private_comm
from collectives.errors import UsageError
from collectives.primitives import (
    binomial_bcast,
    binomial_scatter,
    recursive_doubling_allgather,
    relative_to,
    ring_allgather,
)
from collectives.registry import POWER_OF_TWO, Counterpart, Split, register, whole_message

if TYPE_CHECKING:
    from mpi4py import MPI

DEFAULT_SEG = 256 * 1024


def _binomial_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return lg(p) * (link.alpha + n * link.beta)


def _chain_cost(m: Machine, p: int, n: float, seg: int = DEFAULT_SEG) -> float:
    link = m.flat(p)
    k = max(1, -(-int(n) // max(seg, 1)))
    return (p - 1 + k - 1) * (link.alpha + n / k * link.beta) if p > 1 else 0.0


def _scatter_ring_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return (lg(p) + p - 1) * link.alpha + 2 * (p - 1) / p * n * link.beta


def _scatter_rd_cost(m: Machine, p: int, n: float) -> float:
    link = m.flat(p)
    return 2 * lg(p) * link.alpha + 2 * (p - 1) / p * n * link.beta


@register(
    "bcast",
    "binomial",
    summary="binomial tree",
    cost=_binomial_cost,
    equivalents={
        "openmpi": Counterpart("binomial", id=6),
        "mpich": Counterpart("MPIR_Bcast_intra_binomial"),
    },
)
def binomial(comm: MPI.Comm):
    """Bind the binomial-tree broadcast."""
    comm = private_comm(comm)
    rank, p = comm.Get_rank(), comm.Get_size()

    def call(send, recv, op, root):
        binomial_bcast(comm, recv, (rank - root) % p, p, relative_to(root, p))

    return call


def _check_seg(seg: object) -> None:
    if not isinstance(seg, int) or seg < 1:
        raise UsageError(f"chain: seg must be a positive byte count such as 256K, got {seg!r}")


@register(
    "bcast",
    "chain",
    summary="pipelined chain, segments of seg bytes (Awan et al.)",
    grid={"seg": (64 * 1024, 256 * 1024, 1024 * 1024)},
    split=Split("seg", whole_message),
    cost=_chain_cost,
    check_params=lambda params: _check_seg(params["seg"]),
    # Open MPI's chain with one chain (fan-out 1) is this single pipelined chain.
    equivalents={"openmpi": Counterpart("chain", id=2, fanout=1, segment="seg")},
)
def chain(comm: MPI.Comm, seg: int = DEFAULT_SEG):
    """Bind the pipelined chain broadcast with ``seg``-byte segments."""
    comm = private_comm(comm)
    rank, p = comm.Get_rank(), comm.Get_size()

    def call(send, recv, op, root):
        pos = (rank - root) % p
        prev, nxt = (rank - 1) % p, (rank + 1) % p
        step = max(1, seg // recv.itemsize)
        segments = [recv[s : s + step] for s in range(0, len(recv), step)]
        # All receives are posted first so segments stream in while earlier ones are
        # forwarded; forwarding is non-blocking so the next receive is never held up.
        recvs = [comm.Irecv(s, prev, TAG_DATA) for s in segments] if pos > 0 else []
        sends = []
        for index, segment in enumerate(segments):
            if recvs:
                recvs[index].Wait()
            if pos < p - 1:
                sends.append(comm.Isend(segment, nxt, TAG_DATA))
        mpi.Request.Waitall(sends)

    return call


def _scatter_then(allgather_blocks, comm: MPI.Comm):
    """A scatter + allgather broadcast: the buffer is cut into p blocks, block v belonging
    to the rank at position v from the root."""
    comm = private_comm(comm)
    rank, p = comm.Get_rank(), comm.Get_size()

    def call(send, recv, op, root):
        pos, rank_of = (rank - root) % p, relative_to(root, p)
        bounds = block_bounds(len(recv), p)
        binomial_scatter(comm, recv, bounds, pos, rank_of)
        allgather_blocks(comm, recv, bounds, pos, rank_of)

    return call


@register(
    "bcast",
    "scatter_ring_allgather",
    summary="binomial scatter + ring allgather (van de Geijn)",
    all_ranks_busy=True,  # the allgather, most of the bytes, keeps every rank busy
    cost=_scatter_ring_cost,
    equivalents={
        "openmpi": Counterpart("scatter_allgather_ring", id=9),
        "mpich": Counterpart("MPIR_Bcast_intra_scatter_ring_allgather"),
    },
)
def scatter_ring_allgather(comm: MPI.Comm):
    """Bind scatter + ring allgather."""
    return _scatter_then(
        lambda c, buf, bounds, pos, rank_of: ring_allgather(c, buf, bounds, pos, rank_of, pos), comm
    )


@register(
    "bcast",
    "scatter_rd_allgather",
    summary="binomial scatter + recursive-doubling allgather",
    requires=(POWER_OF_TWO,),
    all_ranks_busy=True,
    cost=_scatter_rd_cost,
    equivalents={
        # Open MPI's binomial scatter + recursive-doubling allgather.
        "openmpi": Counterpart("scatter_allgather", id=8),
        "mpich": Counterpart("MPIR_Bcast_intra_scatter_recursive_doubling_allgather"),
    },
)
def scatter_rd_allgather(comm: MPI.Comm):
    """Bind scatter + recursive-doubling allgather."""
    return _scatter_then(recursive_doubling_allgather, comm)
