"""Facts about each collective, kept in one place.

For every collective: how many elements its buffers hold, where its input lives (in place
or not), which region holds its output, the expected output derived from the known
inputs, and the nccl-tests bandwidth definition (doc/PERFORMANCE.md in nccl-tests):
``algbw = B / t`` and ``busbw = algbw * factor``.

Sizes follow OSU: ``n`` is the element count of one rank's message (for allgather, gather,
alltoall and scatter the per-rank block; for reduce_scatter the per-rank result block, as
in MPI_Reduce_scatter_block's recvcount).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.device import EVERY_RANK, ONE_TO_ALL, TO_ROOT, Flow, device_ready
from collectives.ops import ReduceOp


@dataclass
class Buffers:
    """One call's buffers. ``send is None`` means MPI_IN_PLACE on the send side; for an
    in-place scatter at the root it is ``recv`` that is None, as in MPI."""

    send: Any
    recv: Any


@dataclass(frozen=True)
class CallShape:
    """What a rank needs to know to lay out one call."""

    n: int
    nprocs: int
    rank: int
    root: int
    in_place: bool

    @property
    def is_root(self) -> bool:
        """True on the root rank of a rooted collective."""
        return self.rank == self.root


# Elements computed at once when building inputs: the int64 index arithmetic takes
# several temporaries of 8 bytes an element, which for a whole large message would hold
# more memory than the message's own buffers.
INPUT_CHUNK = 1 << 20


def input_values(
    rank: int, start: int, count: int, dtype: np.dtype, op: ReduceOp | None, nprocs: int
) -> np.ndarray:
    """Rank ``rank``'s input elements ``start .. start+count``: small integers, exact in
    every dtype, different per rank and element so a misplaced block shows."""
    values = np.empty(count, dtype)
    for lo in range(0, count, INPUT_CHUNK):
        hi = min(count, lo + INPUT_CHUNK)
        values[lo:hi] = _input_block(rank, start + lo, hi - lo, op, nprocs)
    return values


def _input_block(rank: int, start: int, count: int, op: ReduceOp | None, nprocs: int) -> np.ndarray:
    idx = np.arange(start, start + count, dtype=np.int64)
    if op is not None and op.name == "prod":
        # Only one rank contributes a factor other than 1 per element, so the product
        # never overflows, whatever the number of ranks.
        values = np.where(idx % nprocs == rank, 1 + idx % 3, 1)
    else:
        values = 1 + (idx * 7 + rank * 3) % 4
    return values


def _reduced_values(
    start: int, count: int, dtype: np.dtype, op: ReduceOp, nprocs: int
) -> np.ndarray:
    """The reduction over all ranks of their inputs, computed here with numpy, a chunk at
    a time (a whole rank's input beside the result would double the memory it takes)."""
    acc = np.empty(count, dtype)
    for lo in range(0, count, INPUT_CHUNK):
        hi = min(count, lo + INPUT_CHUNK)
        part = input_values(0, start + lo, hi - lo, dtype, op, nprocs)
        for rank in range(1, nprocs):
            op.ufunc(part, input_values(rank, start + lo, hi - lo, dtype, op, nprocs), out=part)
        acc[lo:hi] = part
    return acc


def _blocks_from_ranks(
    start_of: Callable[[int], int], n: int, dtype: np.dtype, nprocs: int
) -> np.ndarray:
    """Rank j's elements ``start_of(j) .. +n`` for j = 0..p-1, one after the other (written
    in place: a list of blocks then concatenated would hold the result twice)."""
    blocks = np.empty(n * nprocs, dtype)
    for j in range(nprocs):
        blocks[j * n : (j + 1) * n] = input_values(j, start_of(j), n, dtype, None, nprocs)
    return blocks


@dataclass(frozen=True)
class CollectiveSpec:
    """Everything the harness needs to run, time and check one collective."""

    name: str
    # OSU's name for the test, as its table header says: "# OSU MPI {title} Test".
    title: str
    reduces: bool
    rooted: bool
    # (n, p) -> element counts of the send and receive buffers.
    send_elems: Callable[[int, int], int]
    recv_elems: Callable[[int, int], int]
    # (size_bytes, p) -> B of nccl-tests, and p -> bus-bandwidth factor.
    algbw_bytes: Callable[[int, int], int]
    busbw_factor: Callable[[int], float]
    # Writes the inputs into freshly allocated buffers, honouring in-place.
    fill: Callable[[Buffers, CallShape, ReduceOp | None], None]
    # (buffers, shape) -> the array that holds this rank's output, or None.
    output: Callable[[Buffers, CallShape], Any]
    # (shape, dtype, op) -> the expected output as a numpy array.
    expected: Callable[[CallShape, np.dtype, ReduceOp | None], np.ndarray]
    in_place_send: Callable[[CallShape], bool] = lambda s: s.in_place
    in_place_recv: Callable[[CallShape], bool] = lambda s: False
    # Receive count when the send side is in place, if it differs from recv_elems.
    recv_elems_in_place: Callable[[int, int], int] | None = None
    # Where the receive buffer is read and written (root, others): what staging copies.
    flow: Flow = EVERY_RANK

    def recv_count(self, shape: CallShape) -> int:
        """Elements in this rank's receive buffer."""
        if self.recv_elems_in_place is not None and self.in_place_send(shape):
            return self.recv_elems_in_place(shape.n, shape.nprocs)
        return self.recv_elems(shape.n, shape.nprocs)

    def allocate(self, xp: Any, dtype: np.dtype, shape: CallShape) -> Buffers:
        """Allocate this rank's buffers (send side None when in place)."""
        send = (
            None
            if self.in_place_send(shape)
            else xp.zeros(self.send_elems(shape.n, shape.nprocs), dtype)
        )
        recv = None if self.in_place_recv(shape) else xp.zeros(self.recv_count(shape), dtype)
        # cupy zeroes with a kernel: done before MPI receives into (or sends) the buffers.
        device_ready(send, recv)
        return Buffers(send, recv)


def _vals(
    shape: CallShape,
    dtype: np.dtype,
    op: ReduceOp | None,
    start: int = 0,
    count: int | None = None,
    rank: int | None = None,
) -> np.ndarray:
    return input_values(
        shape.rank if rank is None else rank,
        start,
        shape.n if count is None else count,
        dtype,
        op,
        shape.nprocs,
    )


def _copy_in(dst: Any, values: np.ndarray) -> None:
    """Host ``values`` into ``dst``; on cupy with ``ndarray.set`` (its constructor takes a
    shape, not data), finished before MPI reads the inputs."""
    if isinstance(dst, np.ndarray):
        dst[...] = values
    else:
        dst.set(values)
        device_ready(dst)


def _fill_send_or_recv(bufs: Buffers, shape: CallShape, op: ReduceOp | None, count: int) -> None:
    """Input of ``count`` elements in send, or in recv when in place."""
    target = bufs.recv if bufs.send is None else bufs.send
    _copy_in(target[:count], _vals(shape, target.dtype, op, count=count))


def _fill_own_block(bufs: Buffers, shape: CallShape, op: ReduceOp | None) -> None:
    """Input of n elements in send, or in this rank's block of recv when in place."""
    if bufs.send is not None:
        _copy_in(bufs.send, _vals(shape, bufs.send.dtype, op))
    else:
        lo = shape.rank * shape.n
        _copy_in(bufs.recv[lo : lo + shape.n], _vals(shape, bufs.recv.dtype, op))


def _fill_bcast(bufs: Buffers, shape: CallShape, op: ReduceOp | None) -> None:
    if shape.is_root:
        _copy_in(bufs.recv, _vals(shape, bufs.recv.dtype, None))


def _fill_scatter(bufs: Buffers, shape: CallShape, op: ReduceOp | None) -> None:
    if shape.is_root:
        _copy_in(bufs.send, _vals(shape, bufs.send.dtype, None, count=shape.n * shape.nprocs))


def _recv(bufs: Buffers, shape: CallShape) -> Any:
    return bufs.recv


def _recv_at_root(bufs: Buffers, shape: CallShape) -> Any:
    return bufs.recv if shape.is_root else None


def _all_reduced(shape: CallShape, dtype: np.dtype, op: ReduceOp | None) -> np.ndarray:
    return _reduced_values(0, shape.n, dtype, op, shape.nprocs)


def _root_values(shape: CallShape, dtype: np.dtype, op: ReduceOp | None) -> np.ndarray:
    return _vals(shape, dtype, None, rank=shape.root)


def _gathered(shape: CallShape, dtype: np.dtype, op: ReduceOp | None) -> np.ndarray:
    return _blocks_from_ranks(lambda j: 0, shape.n, dtype, shape.nprocs)


def _by_size(n: int, p: int) -> int:
    return n


def _by_size_times_p(n: int, p: int) -> int:
    return n * p


def _bytes(size: int, p: int) -> int:
    return size


def _bytes_times_p(size: int, p: int) -> int:
    return size * p


def _ring_factor(p: int) -> float:
    return (p - 1) / p


SPECS: dict[str, CollectiveSpec] = {
    spec.name: spec
    for spec in (
        CollectiveSpec(
            "allreduce",
            title="Allreduce Latency",
            reduces=True,
            rooted=False,
            send_elems=_by_size,
            recv_elems=_by_size,
            algbw_bytes=_bytes,
            busbw_factor=lambda p: 2 * (p - 1) / p,
            fill=lambda b, s, op: _fill_send_or_recv(b, s, op, s.n),
            output=_recv,
            expected=_all_reduced,
        ),
        CollectiveSpec(
            "bcast",
            title="Broadcast Latency",
            reduces=False,
            rooted=True,
            send_elems=lambda n, p: 0,
            recv_elems=_by_size,
            algbw_bytes=_bytes,
            busbw_factor=lambda p: 1.0,
            fill=_fill_bcast,
            output=_recv,
            expected=_root_values,
            in_place_send=lambda s: True,
            flow=ONE_TO_ALL,
        ),
        CollectiveSpec(
            "reduce",
            title="Reduce Latency",
            reduces=True,
            rooted=True,
            send_elems=_by_size,
            recv_elems=_by_size,
            algbw_bytes=_bytes,
            busbw_factor=lambda p: 1.0,
            fill=lambda b, s, op: _fill_send_or_recv(b, s, op, s.n),
            output=_recv_at_root,
            expected=_all_reduced,
            in_place_send=lambda s: s.in_place and s.is_root,
            flow=TO_ROOT,
        ),
        CollectiveSpec(
            "allgather",
            title="Allgather Latency",
            reduces=False,
            rooted=False,
            send_elems=_by_size,
            recv_elems=_by_size_times_p,
            algbw_bytes=_bytes_times_p,
            busbw_factor=_ring_factor,
            fill=_fill_own_block,
            output=_recv,
            expected=_gathered,
        ),
        CollectiveSpec(
            "reduce_scatter",
            title="Reduce_scatter Latency",
            reduces=True,
            rooted=False,
            send_elems=_by_size_times_p,
            recv_elems=_by_size,
            # In place, recv holds the whole input and the result lands in its first block.
            recv_elems_in_place=_by_size_times_p,
            algbw_bytes=_bytes_times_p,
            busbw_factor=_ring_factor,
            fill=lambda b, s, op: _fill_send_or_recv(b, s, op, s.n * s.nprocs),
            output=lambda b, s: b.recv[: s.n],
            expected=lambda s, dt, op: _reduced_values(s.rank * s.n, s.n, dt, op, s.nprocs),
        ),
        CollectiveSpec(
            "alltoall",
            title="All-to-All Personalized Exchange Latency",
            reduces=False,
            rooted=False,
            send_elems=_by_size_times_p,
            recv_elems=_by_size_times_p,
            algbw_bytes=_bytes_times_p,
            busbw_factor=_ring_factor,
            fill=lambda b, s, op: _fill_send_or_recv(b, s, None, s.n * s.nprocs),
            output=_recv,
            expected=lambda s, dt, op: _blocks_from_ranks(
                lambda j: s.rank * s.n, s.n, dt, s.nprocs
            ),
        ),
        CollectiveSpec(
            "gather",
            title="Gather Latency",
            reduces=False,
            rooted=True,
            send_elems=_by_size,
            recv_elems=_by_size_times_p,
            algbw_bytes=_bytes_times_p,
            busbw_factor=_ring_factor,
            fill=_fill_own_block,
            output=_recv_at_root,
            expected=_gathered,
            in_place_send=lambda s: s.in_place and s.is_root,
            flow=TO_ROOT,
        ),
        CollectiveSpec(
            "scatter",
            title="Scatter Latency",
            reduces=False,
            rooted=True,
            send_elems=_by_size_times_p,
            recv_elems=_by_size,
            algbw_bytes=_bytes_times_p,
            busbw_factor=_ring_factor,
            fill=_fill_scatter,
            # In place the root keeps its own block where it is, in the send buffer.
            output=lambda b, s: (
                b.send[s.rank * s.n : (s.rank + 1) * s.n] if b.recv is None else b.recv
            ),
            expected=lambda s, dt, op: _vals(s, dt, None, start=s.rank * s.n, rank=s.root),
            in_place_send=lambda s: False,
            in_place_recv=lambda s: s.in_place and s.is_root,
        ),
        CollectiveSpec(
            "barrier",
            title="Barrier Latency",
            reduces=False,
            rooted=False,
            send_elems=lambda n, p: 0,
            recv_elems=lambda n, p: 0,
            algbw_bytes=lambda size, p: 0,
            busbw_factor=lambda p: 0.0,
            fill=lambda b, s, op: None,
            output=lambda b, s: None,
            expected=lambda s, dt, op: np.empty(0, dt),
            in_place_send=lambda s: True,
        ),
    )
}
