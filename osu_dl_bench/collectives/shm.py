"""Intra-node collectives on an MPI shared-memory window: allreduce ``shm`` and bcast ``shm``.

Every rank of the node maps its peers' window segments (MPI_Win_allocate_shared, then
MPI_Win_shared_query) as numpy arrays and reads them directly, instead of copying through
MPI messages: the design of the fastest intra-node paths of MPICH (ch4 POSIX
"release_gather" collectives) and NCCL. Messages are processed in chunks of ``chunk``
bytes so the window stays bounded; it is allocated on first use, grown (collectively) only
when a larger chunk is needed, and then reused by every call.

allreduce ``shm:chunk=C``, per chunk of m elements:
  1. copy in: each rank copies into its own segment the parts of its input that the
     others reduce (its own slice it reads from its private buffer);
  2. sync;
  3. rank r reduces slice r (m/p elements) over all p inputs, in rank order (so the
     result does not depend on which rank reduced it), into the node's result area;
  4. sync;
  5. copy out: every rank copies the whole result into its receive buffer.
  Cost: 2k lg p alpha + (2(p-1)/p + 1) n beta + (p-1)/p n gamma with k = ceil(n/C), alpha
  a barrier round and beta the per-byte cost of a memory copy: the copy-in (p-1)/p n, the
  peers' slices read while reducing (p-1)/p n and the copy-out n are the minimum traffic
  for private input and output buffers.
bcast ``shm:chunk=C``, per chunk: the root copies it into the shared area; sync; the others
  copy it out. Successive chunks (also across calls) use two areas in turn, so a rank can
  write chunk g+1 while its peers still read chunk g: one sync per chunk.
  Cost: k lg p alpha + (n + C) beta (the copy-in and copy-out of successive chunks overlap).

Synchronisation: a passive-target epoch (Win.Lock_all with MODE_NOCHECK) is opened once
when the window is allocated; each sync point is Win.Sync, Barrier, Win.Sync on the
private node communicator: the barrier orders the ranks, the Win.Sync calls make the
stores before it visible to loads after it (MPI_Win_sync plus a process synchronisation:
the unified memory model of the MPI standard's one-sided chapter). Both are cheap under
MPICH (Win.Sync is a memory barrier; the barrier is its shared-memory one).

Constraints: all ranks on one node (ctx.nodes == 1) and host (cpu) buffers; any op (the
reduction keeps rank order). ``NodeAllreduce`` and ``NodeBcast`` also serve the intra-node
steps of the hierarchical algorithms (collectives.hierarchical).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from osu_dl_bench.collectives.common import LinkCost, Machine, block_bounds, lg, private_comm
from osu_dl_bench.collectives.ops import ReduceOp
from osu_dl_bench.collectives.registry import (
    CPU_BUFFERS,
    SINGLE_NODE,
    Split,
    register,
    whole_message,
)
from osu_dl_bench.errors import UsageError

DEFAULT_CHUNK = 4 << 20
CHUNK_GRID = (256 << 10, 1 << 20, 4 << 20, 16 << 20)
# Smallest area allocated: small messages then never regrow the window one size at a time.
_MIN_AREA = 64 << 10

# Called by the node leader between the reduction and the copy-out (hierarchical designs).
AllreduceStep = Callable[[Any, ReduceOp], None]
BcastStep = Callable[[Any], None]


class SharedWindow:
    """A shared-memory window on a node communicator: ``areas_of(local_rank)`` areas of the
    same capacity in each rank's segment, grown collectively when too small."""

    def __init__(self, local: MPI.Comm, areas_of: Callable[[int], int]) -> None:
        self.local = local
        self.rank = local.Get_rank()
        self._areas = [areas_of(r) for r in range(local.Get_size())]
        self.capacity = 0
        self._win: MPI.Win | None = None
        self._segments: dict[int, np.ndarray] = {}
        self._views: dict[tuple[int, int, np.dtype], np.ndarray] = {}

    def reserve(self, nbytes: int) -> None:
        """Make every area hold at least ``nbytes`` (collective: same value on all ranks)."""
        if nbytes <= self.capacity:
            return
        if self._win is not None:
            self._win.Unlock_all()
            self._win.Free()
        # Powers of two: at most a few reallocations over a size sweep, aligned areas.
        self.capacity = max(_MIN_AREA, 1 << (nbytes - 1).bit_length())
        self._win = MPI.Win.Allocate_shared(
            self._areas[self.rank] * self.capacity, 1, comm=self.local
        )
        self._win.Lock_all(MPI.MODE_NOCHECK)
        self._segments = {
            r: np.frombuffer(self._win.Shared_query(r)[0], np.uint8)
            for r, areas in enumerate(self._areas)
            if areas
        }
        self._views = {}

    def area(self, rank: int, index: int, dtype: np.dtype) -> np.ndarray:
        """Area ``index`` of local rank ``rank``'s segment as a 1-D array of ``dtype``."""
        key = (rank, index, dtype)
        view = self._views.get(key)
        if view is None:
            lo = index * self.capacity
            view = self._segments[rank][lo : lo + self.capacity].view(dtype)
            self._views[key] = view
        return view

    def sync(self) -> None:
        """Every rank's earlier stores to the window are visible to every rank's later loads."""
        self._win.Sync()
        self.local.Barrier()
        self._win.Sync()


class NodeAllreduce:
    """Chunked allreduce through a node's shared window; local rank 0's segment also holds
    the node's result area, where the leader may run ``inter`` before the copy-out."""

    def __init__(self, local: MPI.Comm, chunk: int, inter: AllreduceStep | None = None):
        self.size, self.rank = local.Get_size(), local.Get_rank()
        self.chunk = chunk
        self.inter = inter
        # Area 0 of every segment: that rank's input; area 1 of rank 0's: the result.
        self.window = SharedWindow(local, lambda r: 2 if r == 0 else 1)

    def run(self, send: Any, recv: Any, op: ReduceOp) -> None:
        """``recv = op(inputs of all local ranks)``, then ``inter`` on the leader if set."""
        n = len(recv)
        if n == 0:
            return
        src = recv if send is None else send
        step = max(1, self.chunk // recv.itemsize)
        if self.size == 1:
            if send is not None:
                recv[...] = send
            if self.inter is not None:
                # Chunk by chunk all the same: the other nodes' leaders do.
                for lo in range(0, n, step):
                    self.inter(recv[lo : lo + step], op)
            return
        self.window.reserve(min(n, step) * recv.itemsize)
        inputs = [self.window.area(r, 0, recv.dtype) for r in range(self.size)]
        result = self.window.area(0, 1, recv.dtype)
        for lo in range(0, n, step):
            hi = min(lo + step, n)
            self._chunk(src[lo:hi], recv[lo:hi], inputs, result, op)

    def _chunk(self, src: Any, dst: Any, inputs: list, result: Any, op: ReduceOp) -> None:
        m, window = len(src), self.window
        bounds = block_bounds(m, self.size)
        lo, hi = bounds[self.rank], bounds[self.rank + 1]
        mine = inputs[self.rank]
        # Safe to overwrite: every peer finished reading it before the previous chunk's
        # second sync. Likewise the result area is written only after the sync below,
        # which every rank reaches after its previous copy-out.
        mine[:lo] = src[:lo]
        mine[hi:m] = src[hi:]
        window.sync()
        operands = [src[lo:hi] if r == self.rank else inputs[r][lo:hi] for r in range(self.size)]
        out = result[lo:hi]
        op.ufunc(operands[0], operands[1], out=out)
        for operand in operands[2:]:
            op.ufunc(out, operand, out=out)
        window.sync()
        if self.inter is not None:
            if self.rank == 0:
                self.inter(result[:m], op)
            window.sync()
        dst[...] = result[:m]


class NodeBcast:
    """Chunked bcast through two shared areas used in turn; the leader may run ``inter``
    (e.g. a bcast among node leaders) on each chunk before the others copy it out."""

    def __init__(self, local: MPI.Comm, chunk: int) -> None:
        self.size, self.rank = local.Get_size(), local.Get_rank()
        self.chunk = chunk
        self.window = SharedWindow(local, lambda r: 2 if r == 0 else 0)
        # Which area the next chunk uses; advances identically on every rank of the node.
        self.turn = 0

    def run(self, buf: Any, root: int | None, inter: BcastStep | None = None) -> None:
        """Copy ``buf`` of local rank ``root`` (None: not on this node, ``inter`` brings the
        data to the leader) to every local rank."""
        n = len(buf)
        if n == 0:
            return
        step = max(1, self.chunk // buf.itemsize)
        if self.size == 1:
            if inter is not None:
                # Chunk by chunk all the same: the other nodes' leaders do.
                for lo in range(0, n, step):
                    inter(buf[lo : lo + step])
            return
        self.window.reserve(min(n, step) * buf.itemsize)
        for lo in range(0, n, step):
            self._chunk(buf[lo : lo + step], root, inter)

    def _chunk(self, part: Any, root: int | None, inter: BcastStep | None) -> None:
        # This area was last read two chunks ago, by ranks that have all since passed the
        # previous chunk's sync: no sync is needed before writing it again.
        area = self.window.area(0, self.turn, part.dtype)[: len(part)]
        self.turn ^= 1
        if root == self.rank:
            area[...] = part
        if inter is not None:
            if root not in (None, 0):
                self.window.sync()  # the leader forwards what the root just wrote
            if self.rank == 0:
                inter(area)
        self.window.sync()
        if root != self.rank:
            part[...] = area


def check_chunk(chunk: Any, algorithm: str = "shm") -> int:
    """``chunk`` as a positive byte count, else a UsageError naming ``algorithm``."""
    if not isinstance(chunk, int) or chunk < 1:
        raise UsageError(
            f"{algorithm}: chunk must be a positive byte count such as 4M, got {chunk!r}"
        )
    return chunk


def one_node_comm(comm: MPI.Comm) -> MPI.Comm | None:
    """A private duplicate of ``comm`` if all its ranks share memory, else None."""
    own = private_comm(comm)
    node = own.Split_type(MPI.COMM_TYPE_SHARED, key=own.Get_rank())
    one_node = node.Get_size() == own.Get_size()
    node.Free()
    return own if one_node else None


def refuse_several_nodes(algorithm: str) -> Callable[[Any, Any, Any, int], None]:
    """The call a one-node algorithm binds on a communicator that spans several nodes."""

    def refuse(send: Any, recv: Any, op: Any, root: int) -> None:
        # Every rank of a multi-node job sees fewer local ranks than ranks: all raise alike.
        raise UsageError(f"{algorithm} {SINGLE_NODE.reason}: this communicator spans several nodes")

    return refuse


def _chunks(n_bytes: int, chunk: int) -> int:
    return max(1, math.ceil(n_bytes / chunk))


def allreduce_cost(machine: Machine, p: int, n_bytes: int, chunk: int = DEFAULT_CHUNK) -> float:
    """2k lg p alpha + (2(p-1)/p + 1) n beta + (p-1)/p n gamma on the intra-node link."""
    return node_allreduce_cost(machine.intra, p, n_bytes, chunk, syncs=2)


def node_allreduce_cost(link: LinkCost, p: int, n_bytes: int, chunk: int, syncs: int) -> float:
    """Cost of NodeAllreduce with ``syncs`` sync points per chunk on ``link``."""
    if p <= 1:
        return 0.0
    frac = (p - 1) / p
    sync = syncs * _chunks(n_bytes, chunk) * lg(p) * link.alpha
    return sync + (2 * frac + 1) * n_bytes * link.beta + frac * n_bytes * link.gamma


def bcast_cost(machine: Machine, p: int, n_bytes: int, chunk: int = DEFAULT_CHUNK) -> float:
    """k lg p alpha + (n + C) beta on the intra-node link."""
    return node_bcast_cost(machine.intra, p, n_bytes, chunk)


def node_bcast_cost(link: LinkCost, p: int, n_bytes: int, chunk: int) -> float:
    """Cost of NodeBcast on ``link``: one sync per chunk; the root's copy-in of chunk g+1
    overlaps the others' copy-out of chunk g, so the copies take (n + one chunk) beta."""
    if p <= 1:
        return 0.0
    copies = (n_bytes + min(n_bytes, chunk)) * link.beta
    return _chunks(n_bytes, chunk) * lg(p) * link.alpha + copies


_REQUIRES = (SINGLE_NODE, CPU_BUFFERS)


@register(
    "allreduce",
    "shm",
    summary="each rank reduces its slice of a shared-memory window (one node)",
    requires=_REQUIRES,
    defaults={"chunk": DEFAULT_CHUNK},
    grid={"chunk": CHUNK_GRID},
    split=Split("chunk", whole_message),
    cost=allreduce_cost,
    check_params=lambda params: check_chunk(params["chunk"]),
)
def allreduce(comm: MPI.Comm, chunk: int = DEFAULT_CHUNK):
    """Bind the shared-memory allreduce (every rank of ``comm`` on one node)."""
    chunk = check_chunk(chunk)
    engine_comm = one_node_comm(comm)
    if engine_comm is None:
        return refuse_several_nodes("shm")
    engine = NodeAllreduce(engine_comm, chunk)

    def call(send, recv, op, root):
        engine.run(send, recv, op)

    return call


@register(
    "bcast",
    "shm",
    summary="root writes a shared-memory window, the others read it (one node)",
    requires=_REQUIRES,
    defaults={"chunk": DEFAULT_CHUNK},
    grid={"chunk": CHUNK_GRID},
    split=Split("chunk", whole_message),
    cost=bcast_cost,
    check_params=lambda params: check_chunk(params["chunk"]),
)
def bcast(comm: MPI.Comm, chunk: int = DEFAULT_CHUNK):
    """Bind the shared-memory bcast (every rank of ``comm`` on one node)."""
    chunk = check_chunk(chunk)
    engine_comm = one_node_comm(comm)
    if engine_comm is None:
        return refuse_several_nodes("shm")
    engine = NodeBcast(engine_comm, chunk)

    def call(send, recv, op, root):
        engine.run(recv, root)

    return call
