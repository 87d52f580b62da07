"""The memory a rank holds for one measured call, checked against what its node has
before anything is allocated: a message too large for the node is one message on every
rank, not the kernel's OOM killer ending the job without a word."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from collectives import device as cuda_device
from collectives.specs import CallShape, CollectiveSpec
from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.bench_config import host_memory_bytes
from osu_dl_bench.runtime.rank_agreement import agree_on_errors

MEMINFO = "/proc/meminfo"


@dataclass(frozen=True)
class Need:
    """What one rank holds at least for one call: ``rank_bytes`` of host memory for a
    message of ``message_bytes``, made of ``parts`` (in words), and on cuda
    ``device_bytes`` of its GPU's memory, made of ``device_parts``."""

    what: str
    message_bytes: int
    rank_bytes: int
    parts: str
    device_bytes: int = 0
    device_parts: str = ""


def available_bytes() -> int:
    """Memory this node can give new allocations without swapping: the kernel's
    MemAvailable estimate (proc(5)), else the physical memory."""
    try:
        with open(MEMINFO) as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return host_memory_bytes()


def collective_need(
    spec: CollectiveSpec,
    n: int,
    nprocs: int,
    itemsize: int,
    device: str,
    checked: bool = True,
    roots: int = 1,
    staged_calls: int = 1,
    counts: Sequence[int] = (),
) -> Need:
    """Host bytes one rank holds at its peak for a call of ``n`` elements: its send and
    receive buffers and, while they are filled, its input values; where the results are
    ``checked`` their pristine copies and the expected result instead (validating at
    several ``roots`` lays the buffers out again beside them). On cuda, where those live
    on the GPU, the pinned host memory MPI is staged through (``staging_need``), and the
    buffers and their copies as device bytes."""
    send, recv = spec.send_elems(n, nprocs) * itemsize, _recv_bytes(spec, n, nprocs, itemsize)
    layouts = 2 if checked and roots > 1 else 1
    if device == "cuda":
        staging = staging_need(spec, n, nprocs, itemsize, staged_calls, counts)
        copies = 2 * layouts if checked else 1
        what = "send and receive buffers" + (", their pristine copies" if checked else "")
        return replace(staging, device_bytes=copies * (send + recv), device_parts=what)
    message = n * itemsize
    if not checked:
        filling = send or recv  # the input values, built before they are copied in
        return Need(spec.name, message, send + recv + filling, "send and receive buffers")
    parts = "send and receive buffers, their pristine copies, the expected result"
    return Need(spec.name, message, 2 * (send + recv) * layouts + recv, parts)


def staging_need(
    spec: CollectiveSpec,
    n: int,
    nprocs: int,
    itemsize: int,
    staged_calls: int,
    counts: Sequence[int] = (),
) -> Need:
    """Pinned host bytes one rank holds for ``staged_calls`` staged calls (collectives.device)
    of up to ``n`` elements, each called at every one of ``counts`` (default: ``n`` alone):
    the send block they share, grown to the largest send buffer, and each call's own
    receive mirrors, one per size within RECV_MIRROR_BYTES (``recv_mirror_bytes``), each
    as cupy's pinned pool rounds it (``pinned_bytes``)."""
    send = cuda_device.pinned_bytes(spec.send_elems(n, nprocs) * itemsize)
    received = [_recv_bytes(spec, count, nprocs, itemsize) for count in counts or (n,)]
    held = send + staged_calls * cuda_device.recv_mirror_bytes(received) if staged_calls else 0
    calls = "call's" if staged_calls == 1 else "calls'"
    parts = (
        f"the pinned send block and {staged_calls} staged {calls} receive mirrors, one per "
        f"size within {format_size(cuda_device.RECV_MIRROR_BYTES)} each"
    )
    return Need(spec.name, n * itemsize, held, parts)


def _recv_bytes(spec: CollectiveSpec, n: int, nprocs: int, itemsize: int) -> int:
    """The receive buffer of a call of ``n`` elements."""
    return spec.recv_count(CallShape(n, nprocs, rank=0, root=0, in_place=False)) * itemsize


def point_to_point_need(benchmark: str, message_bytes: int) -> Need:
    """A point-to-point test's rank: one send and one receive buffer of the message."""
    return Need(benchmark, message_bytes, 2 * message_bytes, "send and receive buffers")


def node_ranks(comm) -> int:
    """How many of ``comm``'s ranks share this rank's node (its memory), whatever the
    emulated layout says."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return local.Get_size()
    finally:
        local.Free()


def check_node_memory(comm, needs: Iterable[Need], nprocs: int | None = None) -> None:
    """One agreed UsageError on every rank of ``comm`` unless this node holds, for each of
    its ranks, the largest of ``needs`` (calls at ``nprocs`` ranks, default ``comm``'s
    size), and each rank's GPU (the current device: call it after the GPU is chosen) the
    largest device bytes of ``needs``."""
    sharing, nprocs = node_ranks(comm), nprocs or comm.Get_size()
    needs = list(needs)
    need = max(needs, key=lambda x: x.rank_bytes)
    on_device = max(needs, key=lambda x: x.device_bytes)

    def step() -> None:
        if on_device.device_bytes:
            _check_device_memory(on_device, nprocs)
        have = available_bytes()
        if need.rank_bytes * sharing > have:
            raise UsageError(
                f"-m {format_size(need.message_bytes)}: {need.what} at p = {nprocs} holds "
                f"at least {_gib(need.rank_bytes)} on each of {sharing} ranks of "
                f"{socket.gethostname()} ({need.parts}): {_gib(need.rank_bytes * sharing)}, "
                f"more than the {_gib(have)} it has available; choose a smaller -m"
            )

    agree_on_errors(comm, step)


def _check_device_memory(need: Need, nprocs: int) -> None:
    """A UsageError unless this rank's GPU has ``need.device_bytes`` free (cudaMemGetInfo)."""
    free, total = cuda_device.device_memory()
    if need.device_bytes > free:
        raise UsageError(
            f"-m {format_size(need.message_bytes)}: {need.what} at p = {nprocs} holds at "
            f"least {_gib(need.device_bytes)} of device memory on each rank "
            f"({need.device_parts}), more than the {_gib(free)} free of the {_gib(total)} "
            f"of GPU {cuda_device.selected_gpu()} on {socket.gethostname()}; choose a "
            "smaller -m"
        )


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"
