"""GPU (cupy) buffers and MPI: when device memory is ready for MPI, which GPU a rank uses,
whether the MPI library reads device memory, and host staging where it does not.

- Readiness. cupy launches kernels (a reduction ufunc, a copy, a fill) asynchronously on
  the current stream, while mpi4py hands a cupy array's pointer to MPI without any stream
  synchronisation (it reads ``__cuda_array_interface__``/DLPack with no stream: mpi4py
  docs, "GPU-aware MPI + Python GPU arrays"). So wherever MPI reads, or overwrites, memory
  a kernel has just touched, the stream must be synchronised first: ``device_ready``. On
  numpy arrays it does nothing, so the host path pays one ``isinstance``.
- GPU choice. One GPU per rank, chosen once at start from the node-local rank
  (``Split_type(COMM_TYPE_SHARED)``); ranks sharing a GPU are found by device UUID, not
  by comparing counts, so one visible GPU per rank (``--gpus-per-task=1``) is fine; MIG
  instances by their shared PCI bus id or their "MIG-" names. Whether NCCL can run is
  then one decision agreed by every rank of the job (``agreed_nccl_reason``).
- CUDA-awareness. Each library's own way, the build named by MPI_Get_library_version:
  ``MPIX_Query_cuda_support`` (Open MPI's mpi-ext.h, MPICH >= 4.0) read through ctypes
  from the libmpi this process loaded; MVAPICH2's ``MV2_USE_CUDA``, MVAPICH's
  ``MVP_USE_CUDA`` and Cray MPICH's ``MPICH_GPU_SUPPORT_ENABLED`` for those builds only;
  ``OSU_DL_BENCH_CUDA_AWARE=1/0`` overrides them all (any other value is refused).
  ``cuda_awareness`` says how it was found, for the run's metadata and tables; where nothing
  says so MPI is staged.
- Staging. Where MPI is not CUDA-aware, ``for_backend`` wraps an MPI algorithm so that it
  runs on pinned host copies of the buffers (``cupyx.empty_pinned``): send is copied in,
  recv only where the call reads it (in place, and on that rank: a broadcast reads only
  the root's), and recv is copied back where the call writes it (a broadcast: not on its
  root; a reduce: only there), as the collective's ``Flow`` says. The pinned
  memory stays bounded: one send block per thread, grown to the largest call, and per
  wrapped call one receive mirror per size, the most recently used kept while they fit
  ``RECV_MIRROR_BYTES`` (``recv_mirror_bytes``: at most how much, for the memory check
  before a run). Pinning is slow (cudaHostAlloc maps and locks every page), so
  a call that alternates sizes, as the trainer's gradient buckets do, must not pin anew
  each time.
- Streams. cupy gives every thread the legacy default stream unless told otherwise, and
  that stream is ordered against every blocking stream (CUDA Runtime API, "Stream
  synchronization behavior"): a thread that communicates while another computes takes a
  non-blocking stream of its own (``use_own_stream``).

cupy is never imported here unless an array from it is already in hand, or a GPU is asked
for, so importing this module starts no CUDA.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.errors import UsageError
from collectives.mpit import distribution_of
from collectives.units import format_size

CUDA_AWARE_ENV = "OSU_DL_BENCH_CUDA_AWARE"
# Never staged as a whole: nccl takes device pointers itself, and the runtime selector
# ("selector", -a tuned) dispatches to algorithms that are each staged or not when it binds
# them (osu_dl_bench.selection.selector).
UNSTAGED_BACKENDS = ("nccl", "selector")
STAGING_NOTE = (
    "-d cuda: this MPI library is not CUDA-aware (cuda_awareness: its query or switch, or "
    "OSU_DL_BENCH_CUDA_AWARE=0); MPI algorithms stage through pinned host buffers, nccl "
    "does not"
)


def _cupy() -> Any:
    """cupy if this process has imported it (then arrays of it may exist), else None."""
    return sys.modules.get("cupy")


def is_device_array(array: Any) -> bool:
    """True for a cupy array (checked without importing cupy)."""
    if array is None or isinstance(array, np.ndarray):
        return False
    cupy = _cupy()
    return cupy is not None and isinstance(array, cupy.ndarray)


def device_ready(*arrays: Any) -> None:
    """Wait until the kernels queued on the current stream are done if any of ``arrays``
    is a cupy array: call it after a kernel and before MPI reads or overwrites its memory.
    No-op on numpy arrays and None."""
    for array in arrays:
        if is_device_array(array):
            _cupy().cuda.get_current_stream().synchronize()
            return


def settle_for(*arrays: Any) -> Callable[[], None]:
    """What a timed region calls before it stops the clock: waits for the whole device
    (every stream, NCCL's included) when a buffer is on the GPU, else nothing."""
    if any(is_device_array(a) for a in arrays):
        return _cupy().cuda.Device().synchronize
    return _nothing


def _nothing() -> None:
    return None


_own_streams: list[Any] = []  # kept alive as long as the process


def use_own_stream() -> Any:
    """Make a new non-blocking cupy stream the calling thread's current one (on its current
    device) and return it: kernels, copies and NCCL calls the thread queues from then on
    neither wait for nor hold up the legacy default stream, where torch computes."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    stream.use()
    _own_streams.append(stream)
    return stream


# --- one GPU per rank -------------------------------------------------------------------

_selected: dict[str, Any] = {}


def select_local_gpu(comm: Any) -> int:
    """Use GPU ``node-local rank % visible devices`` for the rest of the process; collective
    over ``comm`` the first time (it splits ``comm`` by node, gathers the devices' UUIDs
    and bus ids there, then agrees over all of ``comm`` whether NCCL can run), then the
    cached choice. Returns the device index."""
    if "index" in _selected:
        return _selected["index"]
    import cupy
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        index = local.Get_rank() % cupy.cuda.runtime.getDeviceCount()
        cupy.cuda.Device(index).use()
        places = local.allgather((device_uuid(index), device_bus_id(index)))
    finally:
        local.Free()
    on_this_node = shared_gpu_reason([u for u, _ in places]) or same_board_reason(
        [b for _, b in places]
    )
    _selected["index"] = index
    _selected["shared"] = agreed_nccl_reason(
        comm, on_this_node or mig_reason(), MPI.Get_processor_name()
    )
    return index


def agreed_nccl_reason(comm: Any, mine: str | None, node: str) -> str | None:
    """Why NCCL cannot run on ``comm``'s GPUs, the same text on every rank: the first
    rank's reason that has one, naming its node, or None. Collective over ``comm``
    (one allgather): ranks judge only their own node, and a job whose nodes disagree
    would otherwise have some ranks in NCCL and the others in MPI, waiting forever."""
    for rank, (where, reason) in enumerate(comm.allgather((node, mine))):
        if reason:
            return f"on {where} (rank {rank}): {reason}"
    return None


def device_uuid(index: int) -> str:
    """The device's UUID (cudaDeviceProp.uuid) as hex: the same physical GPU gives the same
    UUID in every process, whatever CUDA_VISIBLE_DEVICES renumbers."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(index)
    uuid = props.get("uuid")
    if uuid is None:  # cupy built against a CUDA without uuid in its properties
        return f"pci:{device_bus_id(index)}"
    return bytes(uuid).hex() if not isinstance(uuid, str) else uuid


def device_bus_id(index: int) -> str:
    """The device's PCI bus id (domain:bus:device, from cudaDeviceProp), which NCCL
    compares between the ranks of a host: MIG instances of one GPU share it."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(index)
    domain, bus, dev = (int(props.get(k, 0)) for k in ("pciDomainID", "pciBusID", "pciDeviceID"))
    return f"{domain:04x}:{bus:02x}:{dev:02x}"


def shared_gpu_reason(uuids: list[str]) -> str | None:
    """None if every node-local rank has its own GPU, else which ranks share one."""
    seen: dict[str, int] = {}
    for rank, uuid in enumerate(uuids):
        if uuid in seen:
            return (
                f"node-local ranks {seen[uuid]} and {rank} use the same GPU ({uuid}); "
                "NCCL needs one GPU per rank: start at most as many ranks per node as GPUs"
            )
        seen[uuid] = rank
    return None


def same_board_reason(bus_ids: list[str]) -> str | None:
    """None if the node-local ranks' devices sit at distinct PCI bus ids, else which two
    share one: distinct devices on one bus id are MIG instances of one GPU, which NCCL
    refuses ("Duplicate GPU detected", src/init.cc compares busId)."""
    seen: dict[str, int] = {}
    for rank, bus_id in enumerate(bus_ids):
        if bus_id in seen:
            return (
                f"node-local ranks {seen[bus_id]} and {rank} use MIG instances of one GPU "
                f"(PCI bus {bus_id}); NCCL needs whole GPUs (MIG is not supported)"
            )
        seen[bus_id] = rank
    return None


MIG_PREFIX = "MIG-"


def mig_reason(visible: str | None = None) -> str | None:
    """Why this process's GPU is refused for NCCL because it is a MIG instance (a UUID
    beginning with "MIG-" in CUDA_VISIBLE_DEVICES, as ``nvidia-smi -L`` names them;
    ``visible`` stands for the variable), else None. cudaDeviceProp has no MIG field, so
    instances are also found by their shared bus id (``same_board_reason``)."""
    text = os.environ.get("CUDA_VISIBLE_DEVICES", "") if visible is None else visible
    names = [n.strip() for n in text.split(",") if n.strip().startswith(MIG_PREFIX)]
    if not names:
        return None
    return f"the GPU is a MIG instance ({names[0]}); NCCL needs whole GPUs (MIG is not supported)"


def expected_sharing_reason(ranks_per_node: int) -> str | None:
    """What ``select_local_gpu`` would find for ``ranks_per_node`` ranks on a node like
    this one (GPU ``local rank % visible devices``, compared by UUID and bus id), for a
    process that plans a job without running it; None where no device can be counted."""
    import cupy

    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # cupy's CUDARuntimeError: no device, no driver
        return None
    chosen = [rank % count for rank in range(ranks_per_node)]
    return (
        shared_gpu_reason([device_uuid(i) for i in chosen])
        or same_board_reason([device_bus_id(i) for i in chosen])
        or mig_reason()
    )


def gpu_sharing_reason() -> str | None:
    """Why NCCL cannot run on this job's GPUs (ranks sharing a GPU, MIG instances), as
    ``select_local_gpu`` found and every rank of its communicator agreed, naming the
    node; None when nothing stands in the way or no selection was made in this process."""
    return _selected.get("shared")


def device_memory() -> tuple[int, int]:
    """(free, total) bytes of the current GPU's memory (cudaMemGetInfo)."""
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


def selected_gpu() -> int | None:
    """The index ``select_local_gpu`` chose, or None before it ran."""
    return _selected.get("index")


# --- CUDA-aware MPI ---------------------------------------------------------------------


def _loaded_libmpi() -> str | None:
    """Path of the libmpi this process mapped (the one mpi4py.MPI is linked to)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                name = os.path.basename(path)
                if name.startswith("libmpi.so") or name.startswith("libmpi_"):
                    return path
    except OSError:
        return None
    return None


def query_cuda_support() -> bool | None:
    """MPIX_Query_cuda_support() of the loaded libmpi: True/False, None where the library
    has no such symbol (or none was found)."""
    path = _loaded_libmpi()
    if path is None:
        return None
    try:
        query = getattr(ctypes.CDLL(path), "MPIX_Query_cuda_support", None)
    except OSError:
        return None
    if query is None:
        return None
    query.restype = ctypes.c_int
    return bool(query())


@dataclass(frozen=True)
class CudaAwareness:
    """Whether MPI may be given device pointers, and how that was found (the override,
    the library's query or its documented switch, or nothing: staged)."""

    aware: bool
    source: str

    @property
    def path(self) -> str:
        """'direct' (MPI reads device memory) or 'staged' (through host buffers)."""
        return "direct" if self.aware else "staged"


# The documented run-time switch of builds whose MPIX_Query_cuda_support does not tell
# whether CUDA is on: MVAPICH's returns 1 whenever it was built with CUDA, even where
# MVP_USE_CUDA left it off (mvapich src/mpid/ch3/channels/common/src/cuda/cuda_util.c);
# MVAPICH2(-GDR) reads MV2_USE_CUDA (MVAPICH2-GDR user guide); Cray MPICH sends GPU
# buffers only with MPICH_GPU_SUPPORT_ENABLED=1 (HPE Cray MPICH, intro_mpi(3)).
CUDA_SWITCHES = {
    "mvapich2": "MV2_USE_CUDA",
    "mvapich": "MVP_USE_CUDA",
    "cray-mpich": "MPICH_GPU_SUPPORT_ENABLED",
}
STAGED_NOTHING_FOUND = "none found: staged"


def cuda_awareness(library_version: str | None = None) -> CudaAwareness:
    """How this process's MPI takes device memory: OSU_DL_BENCH_CUDA_AWARE (1/0; another
    value is a UsageError) if set;
    for a build with a documented switch (``CUDA_SWITCHES``, the build named by
    ``library_version``, default MPI_Get_library_version) that switch; else
    MPIX_Query_cuda_support (Open MPI, MPICH >= 4.0); else not aware (staging is right
    everywhere, only slower)."""
    forced = _override()
    if forced is not None:
        return CudaAwareness(forced == "1", f"{CUDA_AWARE_ENV}={forced}")
    answer = query_cuda_support()
    if answer is False:  # built without CUDA: no switch turns it on
        return CudaAwareness(False, "MPIX_Query_cuda_support=0: staged")
    switch = CUDA_SWITCHES.get(distribution_of(_library_version(library_version)))
    if switch is not None:
        value = os.environ.get(switch, "").strip()
        if value == "1":
            return CudaAwareness(True, f"{switch}=1")
        return CudaAwareness(False, f"{switch}={_recorded(value) or 'unset'}: staged")
    if answer:
        return CudaAwareness(True, "MPIX_Query_cuda_support=1")
    return CudaAwareness(False, STAGED_NOTHING_FOUND)


def _override() -> str | None:
    """OSU_DL_BENCH_CUDA_AWARE's "0" or "1", None where it is unset or empty; any other
    value is a UsageError (read on every rank alike: the entry guard agrees on it), never
    silently taken for "not set"."""
    value = os.environ.get(CUDA_AWARE_ENV, "")
    forced = value.strip()
    if forced in ("", "0", "1"):
        return forced or None
    raise UsageError(
        f"{CUDA_AWARE_ENV}={value!r}: expected 1 (MPI reads device memory), 0 (stage "
        "through host buffers) or unset (ask the MPI library)"
    )


def _recorded(value: str) -> str:
    """An environment value as metadata and warnings record it: as is where printable,
    else escaped (repr), so a control character cannot reach a terminal or a file raw."""
    return value if value.isprintable() else repr(value)


def _library_version(given: str | None) -> str:
    if given is not None:
        return given
    from collectives import mpi

    return mpi.load().Get_library_version()


def cuda_aware() -> bool:
    """Whether MPI may be given device pointers (``cuda_awareness().aware``)."""
    return cuda_awareness().aware


def gpu_facts() -> dict[str, str]:
    """What a result on device buffers records of its GPU: model, driver, CUDA runtime
    and NCCL versions, and whether MPI meets device memory ``direct`` or ``staged`` (with
    how that was found). The GPU is the one this process chose (else device 0)."""
    import cupy

    runtime = cupy.cuda.runtime
    index = selected_gpu() or 0
    name = runtime.getDeviceProperties(index).get("name", b"")
    awareness = cuda_awareness()
    return {
        "gpu_model": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
        "gpu_driver": cuda_version_text(runtime.driverGetVersion()),
        "cuda_runtime": cuda_version_text(runtime.runtimeGetVersion()),
        "nccl_version": _nccl_version(),
        "mpi_cuda": awareness.path,
        "mpi_cuda_source": awareness.source,
    }


def cuda_version_text(version: int) -> str:
    """cudaDriverGetVersion/cudaRuntimeGetVersion's 1000 * major + 10 * minor as text."""
    return f"{version // 1000}.{version % 1000 // 10}"


def nccl_version_text(code: int) -> str:
    """ncclGetVersion's code as text: 10000 * major + 100 * minor + patch from NCCL 2.9,
    1000 * major + 100 * minor + patch before (nccl.h, NCCL_VERSION)."""
    major, rest = (code // 10000, code % 10000) if code >= 10000 else (code // 1000, code % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _nccl_version() -> str:
    try:
        from cupy.cuda import nccl
    except ImportError:
        return "missing"
    return nccl_version_text(nccl.get_version()) if getattr(nccl, "available", False) else "missing"


def needs_staging(device: str, backend: str) -> bool:
    """True when an algorithm of ``backend`` must stage ``device`` buffers through host."""
    return device == "cuda" and backend not in UNSTAGED_BACKENDS and not cuda_aware()


@dataclass(frozen=True)
class Flow:
    """Where a collective reads its receive buffer (in place) and where it writes it: on
    its root, on the other ranks. A staged call copies the buffer to the host only where
    the call reads it and back only where the call writes it."""

    root_reads: bool = True
    others_read: bool = True
    root_writes: bool = True
    others_write: bool = True

    def reads(self, rank: int, root: int) -> bool:
        """Whether the call reads ``rank``'s receive buffer (when the send side is in place)."""
        return self.root_reads if rank == root else self.others_read

    def writes(self, rank: int, root: int) -> bool:
        """Whether the call writes ``rank``'s receive buffer."""
        return self.root_writes if rank == root else self.others_write


EVERY_RANK = Flow()
# MPI_Bcast: the root's buffer is only read, the others' only written (MPI-4.1, 6.4).
ONE_TO_ALL = Flow(others_read=False, root_writes=False)
# MPI_Reduce, MPI_Gather: recvbuf is significant only at the root (MPI-4.1, 6.5, 6.9.1).
TO_ROOT = Flow(others_write=False)


def for_backend(
    call: Callable, backend: str, device: str, flow: Flow = EVERY_RANK, rank: int = 0
) -> Callable:
    """``call`` as it must run on ``device`` buffers: staged through pinned host memory
    where MPI is not CUDA-aware (copying only what ``flow`` says the call reads and
    writes on ``rank``), else unchanged."""
    return staged(call, flow=flow, rank=rank) if needs_staging(device, backend) else call


def staged(
    call: Callable,
    sends: int = 1,
    receives: int = 1,
    flow: Flow = EVERY_RANK,
    rank: int = 0,
) -> Callable:
    """Wrap a collective call: copy the device buffers into pinned host mirrors, run
    ``call`` on those, copy the receive buffer back. ``sends``/``receives``: how many
    messages one call sends from ``send`` and receives into ``recv`` (a bw window: 64),
    each paying the copy it would pay staged on its own (0: no copy). ``flow``: where the
    collective reads and writes its receive buffer, this process being ``rank`` (a
    broadcast copies to the host on its root only, back on the others only)."""
    recv_mirror = PinnedMirrors()

    def call_staged(send, recv, op, root):
        hsend = None if send is None else _send_mirrors.mirror(send)
        for _ in range(sends if send is not None else 0):
            send.get(out=hsend)  # blocking: the stream's earlier kernels are included
        hrecv = None if recv is None else recv_mirror.mirror(recv)
        if send is None and recv is not None and flow.reads(rank, root):
            # In place, the call reads recv; otherwise MPI only overwrites it: no copy.
            recv.get(out=hrecv)
        call(hsend, hrecv, op, root)
        if recv is not None and receives and flow.writes(rank, root):
            for _ in range(receives):
                recv.set(hrecv)
            device_ready(recv)

    return call_staged


class _SendMirrors(threading.local):
    """Pinned host memory for send buffers, one block per thread grown to the largest
    call seen: every staged call copies its whole send buffer in first, so they can
    share it, and a sweep over sizes and variants holds one block, not one per size."""

    def __init__(self) -> None:
        self.block = np.empty(0, np.uint8)

    def mirror(self, array: Any) -> np.ndarray:
        if self.block.nbytes < array.nbytes:
            self.block = np.empty(0, np.uint8)
            _release_pinned()
            self.block = _pinned((array.nbytes,), np.dtype(np.uint8))
        return self.block[: array.nbytes].view(array.dtype).reshape(array.shape)


_send_mirrors = _SendMirrors()


# Pinned receive mirrors one wrapped call keeps across sizes (the least recently used
# are released beyond it; the current size's is always kept).
RECV_MIRROR_BYTES = 1 << 30


def recv_mirror_bytes(recv_bytes: Iterable[int]) -> int:
    """The most pinned host memory one staged call's receive mirrors hold once it has
    received into buffers of each of ``recv_bytes`` (one mirror per size), as the pinned
    pool allocates them (``pinned_bytes``): all of them while they fit RECV_MIRROR_BYTES
    together, and never more than that or the largest (the current size's is always
    kept, alone if it does not fit)."""
    sizes = [pinned_bytes(nbytes) for nbytes in set(recv_bytes)]
    return min(sum(sizes), max(RECV_MIRROR_BYTES, max(sizes, default=0)))


# cupy's pinned memory pool (cupy/cuda/pinned_memory.pyx, PinnedMemoryPool.malloc), which
# cupyx.empty_pinned allocates from, rounds every request up to a multiple of this unit
# and then to the next power of two (internal.clp2): a 27.5 MB bucket pins 32 MiB.
PINNED_UNIT = 512


def pinned_bytes(nbytes: int) -> int:
    """Pinned host bytes cupy's pool takes for a request of ``nbytes``."""
    if nbytes <= 0:
        return 0
    units = -(-nbytes // PINNED_UNIT) * PINNED_UNIT
    return 1 << (units - 1).bit_length()


class PinnedMirrors:
    """Pinned host mirrors of device arrays, one per shape and dtype, the most recently used
    kept while their bytes fit RECV_MIRROR_BYTES: a staged call's receive mirrors, and the
    host buffer of any step that moves device memory through MPI. Not shared between
    calls: where the call only overwrites recv nothing is copied in, so a shared block
    could hand an algorithm that leaves part of recv unwritten another algorithm's right
    answer; a new mirror starts as all-ones bytes instead (NaN, -1), which validation
    catches."""

    def __init__(self) -> None:
        self.arrays: OrderedDict[tuple, np.ndarray] = OrderedDict()

    def mirror(self, array: Any) -> np.ndarray:
        key = (array.shape, np.dtype(array.dtype).str)
        held = self.arrays.get(key)
        if held is not None:
            self.arrays.move_to_end(key)
            return held
        self._make_room(array.nbytes)
        held = self.arrays[key] = _pinned(array.shape, array.dtype)
        held.view(np.uint8).fill(0xFF)
        return held

    def _make_room(self, nbytes: int) -> None:
        """Release the least recently used mirrors until ``nbytes`` more fit."""
        held = sum(pinned_bytes(a.nbytes) for a in self.arrays.values())
        released = False
        while self.arrays and held + pinned_bytes(nbytes) > RECV_MIRROR_BYTES:
            _, oldest = self.arrays.popitem(last=False)
            held -= pinned_bytes(oldest.nbytes)
            released = True
        if released:
            del oldest  # the pool can only give back blocks nothing refers to
            _release_pinned()


def _release_pinned() -> None:
    """Give cupy's pinned-memory pool's unused blocks back (it keeps freed ones)."""
    cupy = _cupy()
    pool = getattr(cupy, "get_default_pinned_memory_pool", None) if cupy else None
    if pool is not None:
        pool().free_all_blocks()


def _pinned(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Page-locked host array (faster and truly asynchronous copies), numpy if pinning
    fails (e.g. a locked-memory limit), said once on stderr."""
    try:
        import cupyx

        return cupyx.empty_pinned(shape, dtype)
    except Exception as error:  # cupy's CUDARuntimeError and friends; plain memory works
        _warn_unpinned(int(np.prod(shape)) * np.dtype(dtype).itemsize, error)
        return np.empty(shape, dtype)


_unpinned_warned: list[bool] = []


def _warn_unpinned(nbytes: int, error: Exception) -> None:
    """One line on stderr, the first time pinning fails in this process: staging then
    copies through pageable memory, slower (the copies go through a driver bounce buffer
    and are not asynchronous: CUDA Runtime API, "API synchronization behavior")."""
    if _unpinned_warned:
        return
    _unpinned_warned.append(True)
    print(
        f"osu-dl-bench: could not pin {format_size(nbytes)} of host memory "
        f"({type(error).__name__}: {error}); staging through pageable memory (slower)",
        file=sys.stderr,
        flush=True,
    )
