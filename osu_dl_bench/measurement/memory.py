"""The memory a rank holds for one measured call, checked against what its node has
before anything is allocated: a message too large for the node is one message on every
rank, not the kernel's OOM killer ending the job without a word."""

from __future__ import annotations

import socket
from collections.abc import Iterable

from collectives.specs import CallShape, CollectiveSpec
from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.options import host_memory_bytes
from osu_dl_bench.runtime import agree_on_errors

MEMINFO = "/proc/meminfo"


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


def rank_bytes(spec: CollectiveSpec, n: int, nprocs: int, itemsize: int, device: str) -> int:
    """Host bytes one rank holds at least for a call of ``n`` elements: its send and
    receive buffers, their pristine copies and the expected result (on cuda, where those
    live on the GPU, the host mirrors MPI is staged through)."""
    shape = CallShape(n, nprocs, rank=0, root=0, in_place=False)
    send = spec.send_elems(n, nprocs) * itemsize
    recv = spec.recv_count(shape) * itemsize
    if device == "cuda":
        return send + recv
    return 2 * (send + recv) + recv


def node_ranks(comm) -> int:
    """How many of ``comm``'s ranks share this rank's node (its memory), whatever the
    emulated layout says."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return local.Get_size()
    finally:
        local.Free()


def check_node_memory(
    comm,
    calls: Iterable[tuple[CollectiveSpec, int]],
    itemsize: int,
    device: str,
    nprocs: int | None = None,
) -> None:
    """One agreed UsageError on every rank of ``comm`` unless this node holds the buffers
    of each of its ranks for the largest of ``calls`` ((spec, elements) at ``nprocs``
    ranks, default ``comm``'s size)."""
    sharing, nprocs = node_ranks(comm), nprocs or comm.Get_size()
    need, spec, n = max((rank_bytes(s, k, nprocs, itemsize, device), s, k) for s, k in calls)

    def step() -> None:
        have = available_bytes()
        if need * sharing > have:
            raise UsageError(
                f"-m {format_size(n * itemsize)}: {spec.name} at p = {nprocs} holds at least "
                f"{_gib(need)} on each of {sharing} ranks of {socket.gethostname()} (send "
                "and receive buffers, their pristine copies, the expected result): "
                f"{_gib(need * sharing)}, more than the {_gib(have)} it has available; "
                "choose a smaller -m"
            )

    agree_on_errors(comm, step)


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"
