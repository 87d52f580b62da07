"""Point-to-point schedules shared by several algorithms, on blocks of one flat buffer.

Every schedule works on *positions* 0..q-1 (ring or hypercube positions) with a function
``rank_of(position)`` giving the communicator rank, so the same code serves rooted
variants (positions relative to the root), folded non-power-of-two groups and plain
ranks. Blocks are element ranges ``bounds[i]:bounds[i+1]`` of ``buf``. Only mpi4py's
buffer calls are used; reductions are in-place ufuncs on whole blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from collectives import mpi
from collectives.common import TAG_DATA, reduce_into
from collectives.ops import ReduceOp

if TYPE_CHECKING:
    from mpi4py import MPI

RankOf = Callable[[int], int]
Bounds = tuple[int, ...]


def _block(buf: Any, bounds: Bounds, lo: int, hi: int | None = None) -> Any:
    """Blocks ``lo .. hi-1`` (default: just ``lo``) of ``buf`` as one contiguous view."""
    hi = lo + 1 if hi is None else hi
    return buf[bounds[lo] : bounds[hi]]


def ring_reduce_scatter(
    comm: MPI.Comm,
    op: ReduceOp,
    buf: Any,
    tmp: Any,
    bounds: Bounds,
    pos: int,
    rank_of: RankOf,
    shift: int = 0,
    seg: int = 0,
) -> int:
    """Ring reduce-scatter of ``buf``'s q blocks in p-1 steps; returns the index of the
    block this position ends up holding fully reduced: (pos + 1 + shift) mod q.

    Step s sends block (pos - s + shift) to the right and reduces the block
    (pos - s - 1 + shift) coming from the left. ``seg`` > 0 splits each incoming block
    into segments of that many elements, reducing each as it lands (it is cache-hot) while
    the rest is still in flight. Needs a commutative op (the ring reorders operands).
    """
    q = len(bounds) - 1
    right, left = rank_of((pos + 1) % q), rank_of((pos - 1) % q)
    for step in range(q - 1):
        send_block = _block(buf, bounds, (pos - step + shift) % q)
        recv_block = _block(buf, bounds, (pos - step - 1 + shift) % q)
        incoming = tmp[: len(recv_block)]
        if seg <= 0 or len(recv_block) <= seg:
            comm.Sendrecv(send_block, right, TAG_DATA, incoming, left, TAG_DATA)
            reduce_into(op, recv_block, incoming)
            continue
        starts = range(0, len(recv_block), seg)
        recvs = [comm.Irecv(incoming[s : s + seg], left, TAG_DATA) for s in starts]
        sends = [
            comm.Isend(send_block[s : s + seg], right, TAG_DATA)
            for s in range(0, len(send_block), seg)
        ]
        for start, request in zip(starts, recvs, strict=True):
            request.Wait()
            reduce_into(op, recv_block[start : start + seg], incoming[start : start + seg])
        mpi.Request.Waitall(sends)
    return (pos + 1 + shift) % q


def ring_allgather(
    comm: MPI.Comm, buf: Any, bounds: Bounds, pos: int, rank_of: RankOf, first_owned: int
) -> None:
    """Ring allgather in q-1 steps: position ``pos`` starts owning block ``first_owned``
    (the same offset from ``pos`` everywhere) and receives the others in place."""
    q = len(bounds) - 1
    right, left = rank_of((pos + 1) % q), rank_of((pos - 1) % q)
    for step in range(q - 1):
        send_block = _block(buf, bounds, (first_owned - step) % q)
        recv_block = _block(buf, bounds, (first_owned - step - 1) % q)
        comm.Sendrecv(send_block, right, TAG_DATA, recv_block, left, TAG_DATA)


def recursive_halving(
    comm: MPI.Comm, op: ReduceOp, buf: Any, tmp: Any, bounds: Bounds, pos: int, rank_of: RankOf
) -> None:
    """Recursive-halving reduce-scatter over q = 2^k positions: afterwards block ``pos`` of
    ``buf`` holds the reduction of every position's block ``pos``. Commutative ops only
    (partners combine out of rank order)."""
    q = len(bounds) - 1
    lo, mask = 0, q >> 1
    while mask:
        partner = pos ^ mask
        keep_upper = bool(pos & mask)
        keep_lo = lo + mask if keep_upper else lo
        send_lo = lo if keep_upper else lo + mask
        kept = _block(buf, bounds, keep_lo, keep_lo + mask)
        incoming = tmp[: len(kept)]
        comm.Sendrecv(
            _block(buf, bounds, send_lo, send_lo + mask),
            rank_of(partner),
            TAG_DATA,
            incoming,
            rank_of(partner),
            TAG_DATA,
        )
        reduce_into(op, kept, incoming)
        lo, mask = keep_lo, mask >> 1


def recursive_doubling_allgather(
    comm: MPI.Comm, buf: Any, bounds: Bounds, pos: int, rank_of: RankOf
) -> None:
    """Recursive-doubling allgather over q = 2^k positions: position ``pos`` starts with
    block ``pos`` and doubles its contiguous window of blocks every step."""
    q = len(bounds) - 1
    mask = 1
    while mask < q:
        partner = pos ^ mask
        mine, theirs = pos & ~(mask - 1), partner & ~(mask - 1)
        comm.Sendrecv(
            _block(buf, bounds, mine, mine + mask),
            rank_of(partner),
            TAG_DATA,
            _block(buf, bounds, theirs, theirs + mask),
            rank_of(partner),
            TAG_DATA,
        )
        mask <<= 1


def bruck_allgather(
    comm: MPI.Comm, work: Any, block: int, pos: int, q: int, rank_of: RankOf
) -> None:
    """Bruck's allgather over q positions on ``work``, q blocks of ``block`` elements: block
    0 holds this position's data on entry; on return block j holds that of position
    (pos + j) % q, after ceil(lg q) exchanges at distances 1, 2, 4, ... (Bruck et al.,
    IEEE TPDS 1997)."""
    dist = 1
    while dist < q:
        count = min(dist, q - dist) * block
        comm.Sendrecv(
            work[:count],
            rank_of((pos - dist) % q),
            TAG_DATA,
            work[dist * block : dist * block + count],
            rank_of((pos + dist) % q),
            TAG_DATA,
        )
        dist <<= 1


def binomial_scatter(comm: MPI.Comm, buf: Any, bounds: Bounds, pos: int, rank_of: RankOf) -> None:
    """Binomial-tree scatter from position 0: position v ends with blocks v .. of its
    subtree (at least block v); block v belongs to position v."""
    q = len(bounds) - 1
    mask = 1
    while mask < q:  # receive my subtree's blocks from my parent
        if pos & mask:
            hi = min(pos + mask, q)
            comm.Recv(_block(buf, bounds, pos, hi), rank_of(pos - mask), TAG_DATA)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:  # hand each child its subtree's blocks
        child = pos + mask
        if child < q:
            comm.Send(_block(buf, bounds, child, min(child + mask, q)), rank_of(child), TAG_DATA)
        mask >>= 1


def binomial_bcast(comm: MPI.Comm, buf: Any, pos: int, q: int, rank_of: RankOf) -> None:
    """Binomial-tree broadcast of the whole ``buf`` from position 0 in ceil(lg q) rounds."""
    mask = 1
    while mask < q:
        if pos & mask:
            comm.Recv(buf, rank_of(pos - mask), TAG_DATA)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if pos + mask < q:
            comm.Send(buf, rank_of(pos + mask), TAG_DATA)
        mask >>= 1


def binomial_reduce(
    comm: MPI.Comm, op: ReduceOp, buf: Any, tmp: Any, pos: int, q: int, rank_of: RankOf
) -> None:
    """Binomial-tree reduction of ``buf`` to position 0 (commutative ops: children are
    combined out of rank order when the root is not rank 0)."""
    mask = 1
    while mask < q:
        if pos & mask:
            comm.Send(buf, rank_of(pos - mask), TAG_DATA)
            return
        if pos + mask < q:
            incoming = tmp[: len(buf)]
            comm.Recv(incoming, rank_of(pos + mask), TAG_DATA)
            reduce_into(op, buf, incoming)
        mask <<= 1


def relative_to(root: int, nprocs: int) -> RankOf:
    """Position -> rank for schedules rooted at ``root`` (position 0 is the root)."""
    return lambda position: (position + root) % nprocs


def identity(position: int) -> int:
    """Position -> rank when positions are ranks."""
    return position
