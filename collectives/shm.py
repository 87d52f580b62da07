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

Mismatched calls: ranks that pass one call different byte counts, element types (byte
order included), chunks, roots or ops (an erroneous MPI program; MPICH's own collectives
stop with "Message truncated") would read and write the window and each other's data at
different offsets and wait at different sync points. So every rank publishes what it was
passed (see ``signature``) in its segment's header and checks every peer's at the call's
first sync, before any byte reaches a receive buffer; on a mismatch every rank raises the
same ``errors.CountMismatch``. The first sync exists anyway; the check adds a cached
signature (one dict look-up), one 64-byte write and a byte comparison per rank (about
1.5 us at p = 2). Nothing a rank can fail on is raised before that sync (a root past int64
is a flag of the signature), so no rank is left waiting there. What must precede it is
bounded by the window as it is (a rank whose first chunk does not fit copies nothing in,
and the window grows after the check, when all ranks agree). An empty call syncs once too:
a peer may have passed a non-empty buffer. Buffers of any shape are used as flat views of
their elements (N-D ones must be C-contiguous), so ranks that pass the same elements in
different shapes agree.

Constraints: all ranks on one node (ctx.nodes == 1) and host (cpu) buffers; any op (the
reduction keeps rank order). ``NodeAllreduce`` and ``NodeBcast`` also serve the intra-node
steps of the hierarchical algorithms (collectives.hierarchical).
"""

from __future__ import annotations

import math
import mmap
import operator
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives import mpi
from collectives.common import LinkCost, Machine, block_bounds, lg, private_comm
from collectives.errors import CountMismatch, UsageError
from collectives.ops import ReduceOp
from collectives.registry import (
    CPU_BUFFERS,
    SINGLE_NODE,
    Counterpart,
    Split,
    register,
    whole_message,
)

if TYPE_CHECKING:
    from mpi4py import MPI

DEFAULT_CHUNK = 4 << 20
CHUNK_GRID = (256 << 10, 1 << 20, 4 << 20, 16 << 20)
# Smallest area allocated: small messages then never regrow the window one size at a time.
_MIN_AREA = 64 << 10

# Called by the node leader between the reduction and the copy-out (hierarchical designs).
AllreduceStep = Callable[[Any, ReduceOp], None]
BcastStep = Callable[[Any], None]


class SharedWindow:
    """A shared-memory window on a node communicator: ``areas_of(local_rank)`` areas of the
    same capacity in each rank's segment, grown collectively when too small, and after
    them a header of ``header_words`` int64 per rank (allocated at once when asked for)."""

    def __init__(
        self, local: MPI.Comm, areas_of: Callable[[int], int], header_words: int = 0
    ) -> None:
        self.local = local
        self.rank, self.size = local.Get_rank(), local.Get_size()
        self._areas = [areas_of(r) for r in range(local.Get_size())]
        # Whole pages: the next rank's segment (contiguous under MPICH) stays page-aligned.
        self._header_words = header_words
        self._header_bytes = -(-header_words * 8 // mmap.PAGESIZE) * mmap.PAGESIZE
        self.capacity = 0
        self.generation = 0  # counts allocations: views made before one are stale
        self._win: MPI.Win | None = None
        self._segments: dict[int, np.ndarray] = {}
        self._views: dict[tuple[int, int, np.dtype], np.ndarray] = {}
        if header_words:
            self._allocate(0)

    def reserve(self, nbytes: int) -> None:
        """Make every area hold at least ``nbytes`` (collective: same value on all ranks)."""
        if nbytes <= self.capacity:
            return
        # Powers of two: at most a few reallocations over a size sweep, aligned areas.
        self._allocate(max(_MIN_AREA, 1 << (nbytes - 1).bit_length()))

    def _allocate(self, capacity: int) -> None:
        if self._win is not None:
            self._win.Unlock_all()
            self._win.Free()
        self.capacity = capacity
        self.generation += 1
        own = self._areas[self.rank] * capacity + self._header_bytes
        self._win = mpi.Win.Allocate_shared(own, 1, comm=self.local)
        self._win.Lock_all(mpi.MODE_NOCHECK)
        self._segments = {
            r: np.frombuffer(self._win.Shared_query(r)[0], np.uint8)
            for r, areas in enumerate(self._areas)
            if areas * capacity + self._header_bytes
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

    def header(self, rank: int) -> np.ndarray:
        """Local rank ``rank``'s header, ``header_words`` int64 after its areas."""
        key = (rank, -1, np.dtype(np.int64))
        view = self._views.get(key)
        if view is None:
            lo = self._areas[rank] * self.capacity
            view = self._segments[rank][lo : lo + self._header_words * 8].view(np.int64)
            self._views[key] = view
        return view

    def sync(self) -> None:
        """Every rank's earlier stores to the window are visible to every rank's later loads."""
        self._win.Sync()
        self.local.Barrier()
        self._win.Sync()


# What a rank passed to a call, as the int64 words of its signature: receive buffer bytes
# and element type (numpy's dtype.str, byte order included, as 8 ASCII bytes), send buffer
# bytes and element type (the receive buffer's when there is none), chunk, root (0 without
# one: FLAGS say whether there is one), FLAGS, op (its name as ASCII bytes; 0: none).
# Everything a rank could fail on is encoded here rather than raised before the sync, so
# its peers never wait there for it; the failure is raised on every rank after it.
SIGNATURE_WORDS = 8
_RECV_BYTES, _RECV_TYPE, _SEND_BYTES, _SEND_TYPE, _CHUNK, _ROOT, _FLAGS, _OP = range(8)
_READ_ONLY = 1  # a receive buffer the call writes is read-only
_STRIDED = 2  # a buffer is not one contiguous block (where the algorithm needs one)
_HAS_ROOT = 4  # the call has a root on this node (the ROOT word)
_BAD_ROOT = 8  # the root is no int64 (the ROOT word is 0)
_OBJECTS = 16  # a buffer holds Python objects (their addresses mean nothing to a peer)
_INT64 = (-(1 << 63), 1 << 63)
_SIGNATURES: dict[tuple, Signature] = {}  # per call arguments: steady-state calls repeat them
_SIGNATURE_CACHE = 1024


@dataclass(frozen=True)
class Signature:
    """A call's signature: its int64 words as bytes, and the fewest local ranks for which
    it is valid by itself (a root must be one of them; sys.maxsize: never valid)."""

    raw: bytes
    ranks_needed: int


def word(text: str) -> int:
    """Up to 8 ASCII characters as one int64 (a longer text: its first 4 and a CRC)."""
    raw = text.encode("ascii", "replace")
    if len(raw) > 8:
        raw = raw[:4] + zlib.crc32(raw).to_bytes(4, "little")
    return int.from_bytes(raw.ljust(8, b"\0"), "little", signed=True)


def _text(code: int) -> str:
    return code.to_bytes(8, "little", signed=True).rstrip(b"\0").decode("ascii", "replace")


def flat(array: Any) -> Any:
    """A 1-D view of ``array`` (the algorithms chunk by len()); a non-contiguous N-D array
    as it is (its signature refuses it: reshaping it would copy)."""
    if array.ndim == 1 or not array.flags.c_contiguous:
        return array
    return array.reshape(-1)


def signature(
    send: Any,
    recv: Any,
    root: Any,
    chunk: int,
    writes: bool,
    contiguous: bool,
    op: Any = None,
) -> Signature:
    """The words a rank publishes about a call: ``writes`` if the call writes ``recv`` on
    this rank, ``contiguous`` if the algorithm needs contiguous buffers (N-D buffers always
    do). Never raises for any ``root``."""
    source = recv if send is None else send
    rflags, sflags = recv.flags, source.flags
    key = (
        recv.shape,
        recv.dtype,
        rflags.writeable,
        rflags.c_contiguous,
        None if send is None else (send.shape, send.dtype, sflags.c_contiguous),
        chunk,
        root if type(root) is int else repr(root),
        writes,
        contiguous,
        None if op is None else op.name,
    )
    found = _SIGNATURES.get(key)
    if found is None:
        found = _signature(source, recv, root, chunk, writes, contiguous, op)
        if len(_SIGNATURES) >= _SIGNATURE_CACHE:
            _SIGNATURES.clear()
        _SIGNATURES[key] = found
    return found


def _signature(
    source: Any, recv: Any, root: Any, chunk: int, writes: bool, contiguous: bool, op: Any
) -> Signature:
    flags = _READ_ONLY if writes and not recv.flags.writeable else 0
    for array in (recv, source):
        if (contiguous or array.ndim > 1) and not array.flags.c_contiguous:
            flags |= _STRIDED
        if array.dtype.hasobject:
            flags |= _OBJECTS
    code = 0
    if root is not None:
        flags |= _HAS_ROOT
        try:
            code = operator.index(root)
        except TypeError:
            code = _INT64[1]
        if not _INT64[0] <= code < _INT64[1]:
            flags, code = flags | _BAD_ROOT, 0
    words = [
        recv.nbytes,
        word(recv.dtype.str),
        source.nbytes,
        word(source.dtype.str),
        chunk,
        code,
        flags,
        0 if op is None else word(op.name),
    ]
    needed = code + 1 if flags & _HAS_ROOT else 0
    if flags & ~_HAS_ROOT or needed < 1 and flags & _HAS_ROOT:
        needed = sys.maxsize
    return Signature(np.array(words, np.int64).tobytes(), needed)


def check_signatures(what: str, calls: CallHeader, mine: Signature, start: int = 0) -> None:
    """Raise CountMismatch naming the first disagreement among the local ranks' signatures,
    published in ``calls`` at word ``start`` (``mine``: this rank's): every rank sees the
    same rows, so every rank raises the same message. The message is built only then."""
    if mine.ranks_needed <= calls.window.size and calls.all_equal(mine.raw, start):
        return
    message = _first_mismatch(calls.rows(start, start + SIGNATURE_WORDS))
    if message:
        raise CountMismatch(f"{what}: {message}")


def _type_name(code: int) -> str:
    try:
        dtype = np.dtype(_text(code))
    except (TypeError, ValueError):
        return "an unknown type"
    if dtype.isnative or dtype.byteorder == "|":
        return dtype.name
    return f"{dtype.name} ({'big' if dtype.byteorder == '>' else 'little'}-endian)"


def _root_of(row: Sequence[int]) -> tuple[int, int]:
    return row[_FLAGS] & (_HAS_ROOT | _BAD_ROOT), row[_ROOT]


def _root_name(row: Sequence[int]) -> str:
    if not row[_FLAGS] & _HAS_ROOT:
        return "none"
    return "beyond int64" if row[_FLAGS] & _BAD_ROOT else str(row[_ROOT])


def _first_mismatch(rows: Sequence[Sequence[int]]) -> str | None:
    """The first disagreement: roots, then byte counts and element types against the root
    (rank 0 if there is none), then each rank's own buffers, chunk, op and flags."""
    first = rows[0]
    alike = rows.count(first) == len(rows)  # the usual case: one row's checks suffice
    message = _root_mismatch(rows, alike) or (None if alike else _size_mismatch(rows))
    if message:
        return message
    for rank, row in enumerate(rows[:1] if alike else rows):
        message = _own_mismatch(row, first)
        if message:
            return f"rank {rank} {message}"
    return None


def _root_mismatch(rows: Sequence[Sequence[int]], alike: bool) -> str | None:
    first = rows[0]
    for rank, row in enumerate(() if alike else rows):
        if _root_of(row) != _root_of(first):
            theirs, ours = _root_name(row), _root_name(first)
            return f"rank {rank} passed root {theirs}, rank 0 passed root {ours}"
    has, root = _root_of(first)
    if has and (has & _BAD_ROOT or not 0 <= root < len(rows)):
        return (
            f"every rank passed root {_root_name(first)}, which is not a rank "
            f"(there are {len(rows)})"
        )
    return None


def _size_mismatch(rows: Sequence[Sequence[int]]) -> str | None:
    """Byte counts, then element types, against the root's (rank 0's if none is here)."""
    has, root = _root_of(rows[0])
    ref = root if has else 0
    label = f"rank {ref} (the root)" if has else f"rank {ref}"
    theirs = rows[ref]
    for rank, row in enumerate(rows):
        if row[_RECV_BYTES] != theirs[_RECV_BYTES]:
            return (
                f"rank {rank} passed {row[_RECV_BYTES]} bytes, "
                f"{label} passed {theirs[_RECV_BYTES]} bytes"
            )
    for rank, row in enumerate(rows):
        if row[_RECV_TYPE] != theirs[_RECV_TYPE]:
            return (
                f"rank {rank} passed {_type_name(row[_RECV_TYPE])} elements, "
                f"{label} passed {_type_name(theirs[_RECV_TYPE])}"
            )
    return None


def _own_mismatch(row: Sequence[int], first: Sequence[int]) -> str | None:
    """What is wrong with one rank's buffers, or its chunk or op against rank 0's."""
    if row[_SEND_BYTES] != row[_RECV_BYTES]:
        return (
            f"passed a send buffer of {row[_SEND_BYTES]} bytes and a receive buffer of "
            f"{row[_RECV_BYTES]} bytes"
        )
    if row[_SEND_TYPE] != row[_RECV_TYPE]:
        return (
            f"passed a send buffer of {_type_name(row[_SEND_TYPE])} and a receive buffer "
            f"of {_type_name(row[_RECV_TYPE])}"
        )
    if row[_CHUNK] != first[_CHUNK]:
        return f"uses chunks of {row[_CHUNK]} bytes, rank 0 of {first[_CHUNK]}"
    if row[_OP] != first[_OP]:
        return f"passed op {_text(row[_OP])}, rank 0 passed op {_text(first[_OP])}"
    if row[_FLAGS] & _READ_ONLY:
        return "passed a read-only receive buffer"
    if row[_FLAGS] & _STRIDED:
        return "passed a non-contiguous buffer (this algorithm copies contiguous bytes)"
    if row[_FLAGS] & _OBJECTS:
        return "passed Python objects (their addresses mean nothing to another process)"
    return None


class CallHeader:
    """Each local rank's row of words about the current call, in the window's headers.
    Two rows per rank, used by alternate calls: a rank may publish call k+1's while a
    slower peer still reads call k's (even when call k failed, and so had no final
    sync), since no rank publishes call k+2's before every rank reached call k+1's sync."""

    def __init__(self, window: SharedWindow, words: int) -> None:
        self.window, self.words = window, words
        self.parity = 0
        self._generation = -1  # of the window the views below were made on
        self._views: list[list[np.ndarray]] = []  # per parity, per rank: its row
        # The same rows as bytes: writing and comparing a memoryview costs a fraction of
        # numpy's indexing, and steady-state calls do nothing else with them.
        self._bytes: list[list[memoryview]] = []
        self._slices: dict[tuple[int, int, int], list[memoryview]] = {}  # of _bytes

    def _rows_of(self, parity: int) -> list[np.ndarray]:
        if self._generation != self.window.generation:
            words, ranks = self.words, range(self.window.size)
            self._views = [
                [self.window.header(r)[p * words : (p + 1) * words] for r in ranks] for p in (0, 1)
            ]
            self._bytes = [[memoryview(row).cast("B") for row in rows] for rows in self._views]
            self._slices = {}
            self._generation = self.window.generation
        return self._views[parity]

    @staticmethod
    def header_words(words: int) -> int:
        """Header size a window needs for rows of ``words`` words."""
        return 2 * words

    def publish(self, raw: bytes, start: int = 0) -> None:
        """Write ``raw`` (int64 words) into this rank's row of the next call from word
        ``start`` on (its peers read it after a sync); a call's first write is at word 0."""
        if not start:
            self.parity ^= 1
            self._rows_of(self.parity)
        lo = 8 * start
        self._bytes[self.parity][self.window.rank][lo : lo + len(raw)] = raw

    def rows(self, start: int = 0, stop: int | None = None) -> list[list[int]]:
        """Every local rank's words [start, stop) of the current call (after the sync that
        follows publish)."""
        return [row[start:stop].tolist() for row in self._rows_of(self.parity)]

    def all_equal(self, raw: bytes, start: int = 0) -> bool:
        """Whether every local rank's row of the current call holds ``raw`` at ``start``."""
        key = (self.parity, start, len(raw))
        views = self._slices.get(key)
        if views is None:
            lo = 8 * start
            views = [row[lo : lo + len(raw)] for row in self._bytes[self.parity]]
            self._slices[key] = views
        # map and count loop in C: a generator would cost more than the comparisons.
        return [*map(memoryview.tobytes, views)].count(raw) == len(views)


class NodeAllreduce:
    """Chunked allreduce through a node's shared window; local rank 0's segment also holds
    the node's result area, where the leader may run ``inter`` before the copy-out."""

    def __init__(
        self,
        local: MPI.Comm,
        chunk: int,
        inter: AllreduceStep | None = None,
        what: str = "allreduce (shm)",
    ):
        self.size, self.rank = local.Get_size(), local.Get_rank()
        self.chunk = chunk
        self.inter = inter
        self.what = what  # names the call in CountMismatch messages
        # Area 0 of every segment: that rank's input; area 1 of rank 0's: the result.
        self.window = SharedWindow(
            local, lambda r: 2 if r == 0 else 1, CallHeader.header_words(SIGNATURE_WORDS)
        )
        self.calls = CallHeader(self.window, SIGNATURE_WORDS)

    def run(self, send: Any, recv: Any, op: ReduceOp) -> None:
        """``recv = op(inputs of all local ranks)``, then ``inter`` on the leader if set."""
        mine = signature(send, recv, None, self.chunk, True, False, op)
        send = None if send is None else flat(send)
        recv = flat(recv)
        n = len(recv)
        src = recv if send is None else send
        step = max(1, self.chunk // recv.itemsize)
        if self.size == 1:
            self._alone(send, recv, op, step)
            return
        head = min(n, step)
        # Both buffers' element sizes: a send buffer of another type must not overflow the
        # area before the check has caught it.
        # A rank whose buffers are refused (mine.ranks_needed) copies nothing in either.
        ready = head * max(recv.itemsize, src.itemsize) <= self.window.capacity
        ready = ready and mine.ranks_needed <= self.size and recv.ndim == src.ndim == 1
        self.calls.publish(mine.raw)
        if ready:
            self._copy_in(src[:head])
        self.window.sync()
        check_signatures(self.what, self.calls, mine)
        if n == 0:
            return
        if not ready:  # all ranks alike: they passed the same sizes
            self.window.reserve(head * recv.itemsize)
            self._copy_in(src[:head])
            self.window.sync()
        self._reduce_and_copy_out(src[:head], recv[:head], op)
        for lo in range(step, n, step):
            hi = min(lo + step, n)
            self._copy_in(src[lo:hi])
            self.window.sync()
            self._reduce_and_copy_out(src[lo:hi], recv[lo:hi], op)

    def _alone(self, send: Any, recv: Any, op: ReduceOp, step: int) -> None:
        if send is not None:
            recv[...] = send
        if self.inter is not None:
            # Chunk by chunk all the same: the other nodes' leaders do.
            for lo in range(0, len(recv), step):
                self.inter(recv[lo : lo + step], op)

    def _copy_in(self, src: Any) -> None:
        """Copy into this rank's segment the parts of its input the others reduce."""
        m = len(src)
        bounds = block_bounds(m, self.size)
        lo, hi = bounds[self.rank], bounds[self.rank + 1]
        mine = self.window.area(self.rank, 0, src.dtype)
        # Safe to overwrite: every peer finished reading it before the previous chunk's
        # second sync. Likewise the result area is written only after the sync that
        # follows, which every rank reaches after its previous copy-out.
        mine[:lo] = src[:lo]
        mine[hi:m] = src[hi:]

    def _reduce_and_copy_out(self, src: Any, dst: Any, op: ReduceOp) -> None:
        """After the chunk's first sync: reduce this rank's slice, sync, copy out."""
        m, window = len(src), self.window
        bounds = block_bounds(m, self.size)
        lo, hi = bounds[self.rank], bounds[self.rank + 1]
        inputs = [window.area(r, 0, src.dtype) for r in range(self.size)]
        result = window.area(0, 1, src.dtype)
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

    def __init__(self, local: MPI.Comm, chunk: int, what: str = "bcast (shm)") -> None:
        self.size, self.rank = local.Get_size(), local.Get_rank()
        self.chunk = chunk
        self.what = what  # names the call in CountMismatch messages
        self.window = SharedWindow(
            local, lambda r: 2 if r == 0 else 0, CallHeader.header_words(SIGNATURE_WORDS)
        )
        self.calls = CallHeader(self.window, SIGNATURE_WORDS)
        # Which area the next chunk uses; advances identically on every rank of the node
        # (by the chunks of the calls that passed the check).
        self.turn = 0

    def run(self, buf: Any, root: int | None, inter: BcastStep | None = None) -> None:
        """Copy ``buf`` of local rank ``root`` (None: not on this node, ``inter`` brings the
        data to the leader) to every local rank."""
        mine = signature(None, buf, root, self.chunk, root != self.rank, False)
        buf = flat(buf)
        n = len(buf)
        step = max(1, self.chunk // buf.itemsize)
        if self.size == 1:
            if inter is not None:
                # Chunk by chunk all the same: the other nodes' leaders do.
                for lo in range(0, n, step):
                    inter(buf[lo : lo + step])
            return
        head = buf[:step]
        ready = head.nbytes <= self.window.capacity and mine.ranks_needed <= self.size
        ready = ready and buf.ndim == 1
        self.calls.publish(mine.raw)
        area = self._start(head, 0, root, inter) if ready and n else None
        self.window.sync()
        check_signatures(self.what, self.calls, mine)
        if n == 0:
            return
        if not ready:  # all ranks alike: they passed the same sizes
            self.window.reserve(head.nbytes)
            area = self._start(head, 0, root, inter)
            self.window.sync()
        self._finish(head, area, root, inter)
        for g, lo in enumerate(range(step, n, step), start=1):
            part = buf[lo : lo + step]
            area = self._start(part, g, root, inter)
            self.window.sync()
            self._finish(part, area, root, inter)
        self.turn = (self.turn + math.ceil(n / step)) % 2

    def _start(self, part: Any, g: int, root: int | None, inter: BcastStep | None) -> Any:
        """Chunk ``g`` of the call up to its first sync: the root copies it in (and the
        leader forwards it, where it is the root or the root is on another node)."""
        # This area was last read two chunks ago, by ranks that have all since passed the
        # previous chunk's sync: no sync is needed before writing it again.
        area = self.window.area(0, (self.turn + g) % 2, part.dtype)[: len(part)]
        if root == self.rank:
            area[...] = part
        if inter is not None and root in (None, 0) and self.rank == 0:
            inter(area)
        return area

    def _finish(self, part: Any, area: Any, root: int | None, inter: BcastStep | None) -> None:
        """The chunk after its first sync: the leader forwards what another local root
        wrote, then everyone but the root copies it out."""
        if inter is not None and root not in (None, 0):
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
    node = own.Split_type(mpi.COMM_TYPE_SHARED, key=own.Get_rank())
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
    grid={"chunk": CHUNK_GRID},
    split=Split("chunk", whole_message),
    cost=bcast_cost,
    check_params=lambda params: check_chunk(params["chunk"]),
    # MPICH's one-node bcast: the root copies the message into shared cells, the others
    # copy it out.
    equivalents={"mpich_posix": Counterpart("release_gather")},
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
