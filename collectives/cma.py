"""Single-copy intra-node collectives with Linux Cross Memory Attach: allreduce ``cma`` and
bcast ``cma``.

The shared-window designs (collectives.shm) copy every byte twice, into the window and out
of it, because MPI buffers are private memory. Linux's process_vm_readv/process_vm_writev
copy straight between two processes' private buffers in one kernel copy; this is the
large-message intra-node path of MPICH (ch4 IPC), Open MPI (smsc/cma) and MVAPICH2.
The ranks only exchange buffer addresses, through a small shared window, and synchronise
with that window's sync (shm.SharedWindow.sync: Win.Sync, Barrier, Win.Sync).

allreduce ``cma:chunk=C`` (block i of the message belongs to local rank i):
  1. publish the addresses of the send and receive buffers; sync;
  2. reduce-scatter: rank i reads block i of every peer's input, C bytes at a time (so
     they are still in cache when reduced), and reduces it into block i of its output;
  3. sync; allgather: rank i reads block j of peer j's output into its own, for every j;
  4. sync, so no rank returns (and reuses its buffers) while a peer still reads them.
  Cost: 3 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma: half the copies of shm's.
bcast ``cma``: every rank publishes its buffer's address; sync; the root writes block k of
  the message into the rank k places after it, while every other rank reads the remaining
  blocks from the root; sync. All p ranks copy at once, (p-1)/p n bytes each.
  Cost: 2 lg p alpha + (p-1)/p n beta.

Registered buffers (buffer kind ``cpu-registered``, collectives.registered): a peer whose
buffer lives in registered memory publishes its memory file too, and the others map it
(once, cached) and reach its blocks with plain loads: the reduce-scatter reduces straight
from the peers' inputs (no copy into the output first) and the allgather and bcast copy
with memcpy instead of a system call per block. Each rank decides per peer, so registered
and private buffers mix in one call. This is the zero-copy path of NCCL's registered
buffers and of XPMEM-based MPI collectives.

Mismatched calls: the kernel copies whatever addresses a peer publishes, so a rank that
passed fewer bytes than its peers would have them read and write past its buffer. Each
rank publishes its buffers' byte counts, element types, root and op beside their
addresses (shm.signature) and, after the sync that publishes them, checks every peer's before any
copy: on a mismatch every rank raises the same errors.CountMismatch and nothing is copied.
The table is exchanged on every call anyway, so this costs little; an empty call now
syncs once too, since a peer may have passed a non-empty buffer. Every copy is also
bounded by the published length (a mapping by the array's span in its region).

Constraints: all ranks on one node and contiguous host buffers; allreduce needs a
commutative op (block results are combined in peer order, not rank order). Registered only
on Linux where the kernel lets a process read its peers (kernel.yama.ptrace_scope at most
1); otherwise ``registry.UNAVAILABLE_BACKENDS['cma']`` says why. Under ptrace_scope 1 only
ancestors may read a process, so binding a cma algorithm (not importing the package) calls
prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY), as Open MPI's smsc/cma component
(smsc_cma_component.c) does. Binding then probes one read from a peer and fails with the
reason on every rank if prctl or the kernel refuses.
Source: the process_vm_readv(2) and prctl(2) manual pages.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives.common import Machine, Scratch, block_bounds, lg
from collectives.errors import UsageError
from collectives.ops import ReduceOp
from collectives.registered import PeerMaps, region_of
from collectives.registered import unavailable_reason as registered_unavailable
from collectives.registered import zeros as registered_zeros
from collectives.registry import (
    COMMUTATIVE_OP,
    CPU_BUFFERS,
    SINGLE_NODE,
    UNAVAILABLE_BACKENDS,
    Split,
    largest_block,
    register,
)
from collectives.shm import (
    SIGNATURE_WORDS,
    CallHeader,
    SharedWindow,
    Signature,
    check_chunk,
    check_signatures,
    flat,
    one_node_comm,
    refuse_several_nodes,
    signature,
)

if TYPE_CHECKING:
    from mpi4py import MPI

NAME = "cma"
DEFAULT_CHUNK = 512 << 10
CHUNK_GRID = (128 << 10, 512 << 10, 2 << 20)
_PTRACE_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")
_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1).value
# The address table, per local rank and call: its pid, then for its send and its receive
# buffer: address, registered memory file (-1: private memory), the region's serial, offset
# in it, length in bytes; then the call's signature (shm.signature).
_SEND, _RECV = 1, 6
_FD, _SERIAL, _OFFSET, _NBYTES = 1, 2, 3, 4  # after a buffer's address
_SIGNATURE = 11
_WORDS = _SIGNATURE + SIGNATURE_WORDS
_ADDRESS_ROW = struct.Struct(f"={_SIGNATURE}q")  # the words before the signature
_PTRACER_SET = False  # prctl done in this process (it lasts for the process)


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def unavailable_reason() -> str | None:
    """None if this kernel allows single-copy reads between processes, else why not."""
    if not sys.platform.startswith("linux"):
        return f"needs Linux's process_vm_readv (this is {sys.platform})"
    if not hasattr(ctypes.CDLL(None), "process_vm_readv"):
        return "the C library has no process_vm_readv"
    if _PTRACE_SCOPE.exists():
        scope = _PTRACE_SCOPE.read_text().strip()
        if scope not in ("0", "1"):
            return f"kernel.yama.ptrace_scope={scope} forbids reading peer processes (needs <= 1)"
    return _self_read_refused()


def _ptrace_scope() -> str | None:
    """Yama's kernel.yama.ptrace_scope, or None without Yama."""
    return _PTRACE_SCOPE.read_text().strip() if _PTRACE_SCOPE.exists() else None


def _set_ptracer_any() -> int:
    """prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY): 0, else the errno of its failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(_PR_SET_PTRACER_ANY), 0, 0, 0) == 0:
        return 0
    return ctypes.get_errno() or errno.EPERM


def allow_peer_reads() -> str | None:
    """Let this user's other processes read this one where Yama's ptrace_scope is 1 (only
    ancestors may otherwise); None if done or not needed, else why prctl failed."""
    global _PTRACER_SET
    if _PTRACER_SET or _ptrace_scope() != "1":
        return None
    code = _set_ptracer_any()
    if code:
        return f"prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) failed: {os.strerror(code)}"
    _PTRACER_SET = True
    return None


def _self_read_refused() -> str | None:
    """Why a read of this process's own memory fails (a seccomp profile or sandbox that
    blocks the system call), else None: caught here, cma is listed as unavailable instead
    of failing every run that binds it."""
    source, target = np.arange(2, dtype=np.int64), np.zeros(2, dtype=np.int64)
    try:
        Kernel().read(os.getpid(), source.ctypes.data, target)
    except OSError as exc:
        return f"the kernel refuses process_vm_readv here ({exc.strerror or exc})"
    if not np.array_equal(source, target):
        return "process_vm_readv copied the wrong bytes"
    return None


class Kernel:
    """process_vm_readv/writev on numpy arrays; a short transfer is continued, an error
    raises OSError."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._libc = libc
        signature = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong]
        for name in ("process_vm_readv", "process_vm_writev"):
            function = getattr(libc, name)
            function.argtypes = [*signature, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.c_ulong]
            function.restype = ctypes.c_ssize_t

    def read(self, pid: int, remote: int, local: np.ndarray) -> None:
        """Copy ``local.nbytes`` bytes at address ``remote`` of process ``pid`` into ``local``."""
        self._transfer(self._libc.process_vm_readv, pid, remote, local)

    def write(self, pid: int, remote: int, local: np.ndarray) -> None:
        """Copy ``local`` to address ``remote`` of process ``pid``."""
        self._transfer(self._libc.process_vm_writev, pid, remote, local)

    @staticmethod
    def _transfer(function: Any, pid: int, remote: int, local: np.ndarray) -> None:
        done, total, base = 0, local.nbytes, local.ctypes.data
        while done < total:
            mine = _IoVec(base + done, total - done)
            theirs = _IoVec(remote + done, total - done)
            moved = function(pid, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
            if moved <= 0:
                code = ctypes.get_errno() or errno.EIO
                raise OSError(code, f"{function.__name__} from pid {pid}: {os.strerror(code)}")
            done += moved


class AddressTable:
    """Each local rank's pid, buffer addresses and call signature, published per call
    through a shared window's headers (shm.CallHeader)."""

    def __init__(self, local: MPI.Comm) -> None:
        self.size, self.rank = local.Get_size(), local.Get_rank()
        self.maps = PeerMaps()
        self.window = SharedWindow(local, lambda r: 0, CallHeader.header_words(_WORDS))
        self.calls = CallHeader(self.window, _WORDS)
        self._pid = os.getpid()
        self._rows: list[list[int]] = []  # every rank's row of the current call
        self._mine: Signature | None = None  # this rank's signature of the current call

    def publish(self, send: np.ndarray, recv: np.ndarray, mine: Signature) -> None:
        """Make this rank's buffers and call signature ``mine`` visible to its peers, and
        read theirs (collective: syncs)."""
        row = [self._pid]
        for array in (send, recv):
            found = region_of(array)
            region, offset = found if found is not None else (None, 0)
            fd, serial = (-1, 0) if region is None else (region.fd, region.serial)
            row += [array.ctypes.data, fd, serial, offset, array.nbytes]
        self.calls.publish(_ADDRESS_ROW.pack(*row))
        self.calls.publish(mine.raw, _SIGNATURE)
        self._mine = mine
        self.window.sync()
        self._rows = self.calls.rows()

    def check(self, what: str) -> None:
        """Raise CountMismatch on every rank if the ranks' signatures disagree."""
        check_signatures(what, self.calls, self._mine, _SIGNATURE)

    def pid(self, rank: int) -> int:
        """Process id of local rank ``rank``."""
        return self._rows[rank][0]

    def address(self, rank: int, send: bool, byte_start: int, nbytes: int) -> int:
        """Address of bytes [byte_start, + nbytes) of local rank ``rank``'s send (or
        receive) buffer in the current call."""
        first = _SEND if send else _RECV
        row = self._rows[rank]
        _check_within(row[first + _NBYTES], byte_start, nbytes, rank)
        return row[first] + byte_start

    def mapped(
        self, rank: int, send: bool, byte_start: int, like: np.ndarray, writable: bool = False
    ) -> Any:
        """Bytes [byte_start, + like.nbytes) of local rank ``rank``'s send (or receive)
        buffer, mapped here (read-only unless ``writable``) as an array of like's dtype;
        None unless that buffer is registered (collectives.registered) and this process
        may map it."""
        first = _SEND if send else _RECV
        row = self._rows[rank]
        fd, span = row[first + _FD], row[first + _NBYTES]
        _check_within(span, byte_start, like.nbytes, rank)
        if fd < 0 or rank == self.rank:
            return None
        raw = self.maps.bytes_of(row[0], fd, row[first + _SERIAL], writable)
        offset = row[first + _OFFSET]
        if raw is None or offset + span > len(raw):
            return None  # not the region the peer allocated: the kernel copy is bounded
        lo = offset + byte_start
        return raw[lo : lo + like.nbytes].view(like.dtype)

    def sync(self) -> None:
        """A node-wide synchronisation point (see shm.SharedWindow.sync)."""
        self.window.sync()


def _check_within(span: int, byte_start: int, nbytes: int, rank: int) -> None:
    """Every copy stays inside the peer's published buffer (the per-call check makes this
    hold; a failure here is a bug of the algorithm, not of the caller)."""
    if byte_start < 0 or byte_start + nbytes > span:
        raise IndexError(
            f"cma: bytes [{byte_start}, {byte_start + nbytes}) lie outside rank {rank}'s "
            f"{span}-byte buffer"
        )


def _probe(table: AddressTable, kernel: Kernel, comm: MPI.Comm, refused: str | None) -> None:
    """Read a word from the next rank; if prctl (``refused``: why) or the kernel refuses on
    any rank, fail on all."""
    mine = np.full(1, table.rank, np.int64)
    got = np.empty(1, np.int64)
    table.publish(mine, mine, _own_signature(mine))
    peer = (table.rank + 1) % table.size
    error = refused or ""
    try:
        if not error:
            kernel.read(table.pid(peer), table.address(peer, True, 0, got.nbytes), got)
    except OSError as exc:
        error = str(exc)
    failed = comm.allreduce(1 if error else 0)  # small int: once per bind, not per call
    table.sync()
    if failed:
        raise UsageError(
            f"cma: a single-copy read between ranks was refused"
            f"{f' ({error})' if error else ' on another rank'}; "
            "check kernel.yama.ptrace_scope (needs <= 1) and the container's seccomp profile"
        )


_MAPPING_WARNED = False


def _own_signature(array: np.ndarray) -> Signature:
    """The signature of a probe, which every rank makes alike."""
    return signature(None, array, None, 0, True, True)


def _probe_mapping(table: AddressTable, comm: MPI.Comm) -> None:
    """Map a word of the next rank's registered memory; where any rank cannot, say once
    (on stderr, from rank 0) that registered buffers will be copied through the kernel:
    still correct, but without the zero-copy path the user allocated them for."""
    global _MAPPING_WARNED
    if table.size == 1 or registered_unavailable() is not None:
        return
    mine = registered_zeros(1, np.int64)
    mine[0] = table.rank + 1
    table.publish(mine, mine, _own_signature(mine))
    peer = (table.rank + 1) % table.size
    seen = table.mapped(peer, True, 0, mine)
    works = seen is not None and int(seen[0]) == peer + 1
    refused = comm.allreduce(0 if works else 1)
    table.sync()
    if refused and comm.Get_rank() == 0 and not _MAPPING_WARNED:
        _MAPPING_WARNED = True
        why = table.maps.last_error or "on another rank"
        print(
            f"osu-dl-bench: cma: peers cannot map registered buffers here ({why}); "
            "they are copied through the kernel instead",
            file=sys.stderr,
        )


class _Bound:
    """The per-communicator state of a cma algorithm."""

    def __init__(self, comm: MPI.Comm) -> None:
        self.table = AddressTable(comm)
        self.kernel = Kernel()
        self.scratch = Scratch()
        p, me = self.table.size, self.table.rank
        # Local ranks other than this one, starting after it (spreads the load); fixed
        # per communicator, so computed once here rather than on every call.
        self.peers = tuple((me + i) % p for i in range(1, p))
        # Before the probe's sync: no peer reads this process before it allowed them.
        refused = allow_peer_reads()
        _probe(self.table, self.kernel, comm, refused)
        _probe_mapping(self.table, comm)


def _byte_offset(array: np.ndarray, index: int) -> int:
    return index * array.itemsize


def _reduce_chunk(
    b: _Bound,
    src: Any,
    recv: Any,
    in_place: bool,
    op: ReduceOp,
    start: int,
    stop: int,
    scratch: Any,
) -> None:
    """recv[start:stop] = op over every rank's input[start:stop]. A peer's registered input
    is reduced straight from its mapping; a private one is first read with the kernel (out
    of place, the first peer's part lands in recv itself and is reduced there while it is
    still in cache: measured faster than going through scratch)."""
    table, acc = b.table, recv[start:stop]

    def peer_input(peer: int, into: Any) -> Any:
        byte_start = _byte_offset(src, start)
        mapped = table.mapped(peer, True, byte_start, into)
        if mapped is not None:
            return mapped
        address = table.address(peer, True, byte_start, into.nbytes)
        b.kernel.read(table.pid(peer), address, into)
        return into

    rest = b.peers
    if not in_place:
        op.ufunc(peer_input(rest[0], acc), src[start:stop], out=acc)
        rest = rest[1:]
    for peer in rest:
        op.ufunc(acc, peer_input(peer, scratch), out=acc)


def run_allreduce(b: _Bound, send: Any, recv: np.ndarray, op: ReduceOp, chunk: int) -> None:
    """Single-copy allreduce of ``send`` (None: in place) into ``recv``."""
    table = b.table
    mine = signature(send, recv, None, 0, True, True, op)
    # 1-D views: blocks are cut by len(); a non-contiguous buffer stays as it is, refused.
    send, recv = None if send is None else flat(send), flat(recv)
    src = recv if send is None else send
    n = len(recv)
    if table.size == 1:
        recv[...] = src
        return
    table.publish(src, recv, mine)
    table.check("allreduce (cma)")
    if n == 0:
        return
    bounds = block_bounds(n, table.size)
    lo, hi = bounds[table.rank], bounds[table.rank + 1]
    step = max(1, chunk // recv.itemsize)
    scratch = b.scratch.get(NAME, min(step, max(hi - lo, 1)), recv)
    for start in range(lo, hi, step):
        stop = min(start + step, hi)
        _reduce_chunk(b, src, recv, send is None, op, start, stop, scratch[: stop - start])
    table.sync()
    for peer in b.peers:
        block = recv[bounds[peer] : bounds[peer + 1]]
        if len(block):
            _pull(b, peer, _byte_offset(recv, bounds[peer]), block)
    table.sync()


def _pull(b: _Bound, peer: int, byte_start: int, into: np.ndarray) -> None:
    """into = bytes [byte_start, ...) of the peer's receive buffer (mapped, or the kernel)."""
    table = b.table
    mapped = table.mapped(peer, False, byte_start, into)
    if mapped is not None:
        np.copyto(into, mapped)
    else:
        address = table.address(peer, False, byte_start, into.nbytes)
        b.kernel.read(table.pid(peer), address, into)


def run_bcast(b: _Bound, buf: np.ndarray, root: int) -> None:
    """Single-copy bcast of ``buf`` from local rank ``root``: the root writes one block into
    each peer while the peers read the other blocks from it."""
    table = b.table
    mine = signature(None, buf, root, 0, table.rank != root, True)
    buf = flat(buf)
    n, p, me = len(buf), table.size, table.rank
    if p == 1:
        return
    table.publish(buf, buf, mine)
    table.check("bcast (cma)")
    if n == 0:
        return
    bounds = block_bounds(n, p)

    def block(index: int) -> np.ndarray:
        return buf[bounds[index] : bounds[index + 1]]

    if me == root:
        for peer in b.peers:
            index = (peer - root) % p
            part, start = block(index), _byte_offset(buf, bounds[index])
            if len(part):
                _push(b, peer, start, part)
    else:
        written_by_root = (me - root) % p
        for index in range(p):
            part = block(index)
            if index != written_by_root and len(part):
                _pull(b, root, _byte_offset(buf, bounds[index]), part)
    table.sync()


def _push(b: _Bound, peer: int, byte_start: int, part: np.ndarray) -> None:
    """Bytes [byte_start, ...) of the peer's buffer = part (mapped writable, or the kernel)."""
    table = b.table
    mapped = table.mapped(peer, False, byte_start, part, writable=True)
    if mapped is not None:
        np.copyto(mapped, part)
    else:
        address = table.address(peer, False, byte_start, part.nbytes)
        b.kernel.write(table.pid(peer), address, part)


def allreduce_cost(machine: Machine, p: int, n_bytes: int, chunk: int = DEFAULT_CHUNK) -> float:
    """3 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma on the intra-node link."""
    if p <= 1:
        return 0.0
    link, frac = machine.intra, (p - 1) / p
    return 3 * lg(p) * link.alpha + 2 * frac * n_bytes * link.beta + frac * n_bytes * link.gamma


def bcast_cost(machine: Machine, p: int, n_bytes: int) -> float:
    """2 lg p alpha + (p-1)/p n beta on the intra-node link."""
    if p <= 1:
        return 0.0
    link = machine.intra
    return 2 * lg(p) * link.alpha + (p - 1) / p * n_bytes * link.beta


def _bind(comm: MPI.Comm) -> _Bound | None:
    engine_comm = one_node_comm(comm)
    return None if engine_comm is None else _Bound(engine_comm)


def allreduce(comm: MPI.Comm, chunk: int = DEFAULT_CHUNK):
    """Bind the single-copy allreduce (every rank of ``comm`` on one node)."""
    chunk = check_chunk(chunk, NAME)
    bound = _bind(comm)
    if bound is None:
        return refuse_several_nodes(NAME)

    def call(send, recv, op, root):
        run_allreduce(bound, send, recv, op, chunk)

    return call


def bcast(comm: MPI.Comm):
    """Bind the single-copy bcast (every rank of ``comm`` on one node)."""
    bound = _bind(comm)
    if bound is None:
        return refuse_several_nodes(NAME)

    def call(send, recv, op, root):
        run_bcast(bound, recv, root)

    return call


def register_algorithms() -> None:
    """Register the cma allreduce and bcast where the kernel allows them, else say why."""
    reason = unavailable_reason()
    if reason:
        UNAVAILABLE_BACKENDS[NAME] = reason
        return
    register(
        "allreduce",
        NAME,
        summary="single-copy reduce-scatter + allgather between private buffers "
        "(Linux CMA, one node)",
        requires=(SINGLE_NODE, CPU_BUFFERS, COMMUTATIVE_OP),
        grid={"chunk": CHUNK_GRID},
        split=Split("chunk", largest_block),
        cost=allreduce_cost,
        check_params=lambda params: check_chunk(params["chunk"], NAME),
    )(allreduce)
    register(
        "bcast",
        NAME,
        summary="root and peers copy blocks straight between private buffers (Linux CMA, one node)",
        requires=(SINGLE_NODE, CPU_BUFFERS),
        all_ranks_busy=True,  # the root writes one block while every peer reads the others
        cost=bcast_cost,
    )(bcast)


register_algorithms()
