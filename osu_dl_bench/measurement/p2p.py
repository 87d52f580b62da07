"""OSU's point-to-point tests between ranks 0 and 1: latency, bw and bibw.

latency (osu_latency.c): ping-pong, one-way latency = round trip / 2.
bw (osu_bw.c): rank 0 posts a window of 64 non-blocking sends, rank 1 the receives and a
4-byte acknowledgement; bandwidth = size * window / time, in MB/s with 1 MB = 1e6 B.
bibw (osu_bibw.c): both ranks send and receive a window at once; 2 * size * window / time.
Rounds run back to back through the kernel's loop (kernel.timed_round) with no barrier
between them, as in OSU's point-to-point loops.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mpi4py import MPI

from collectives import Buffers
from collectives.device import (
    STAGING_NOTE,
    device_ready,
    needs_staging,
    select_local_gpu,
    staged,
)
from collectives.registry import CollectiveCall
from collectives.specs import input_values
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.harness import Setting
from osu_dl_bench.measurement.kernel import count_wrong, timed_round
from osu_dl_bench.measurement.options import BW_WINDOW, BenchConfig
from osu_dl_bench.measurement.records import BenchRecord
from osu_dl_bench.runtime import Topology

TAG = 1
ACK_TAG = 2


def check_pair(nprocs: int, benchmark: str) -> None:
    """OSU's point-to-point tests need exactly two processes."""
    if nprocs != 2:
        raise UsageError(f"{benchmark} needs exactly 2 processes, got {nprocs}")


def latency_round(comm: MPI.Comm, send, recv) -> None:
    """One ping-pong between ranks 0 and 1 (osu_latency.c's loop body)."""
    if comm.Get_rank() == 0:
        comm.Send(send, 1, TAG)
        comm.Recv(recv, 1, TAG)
    else:
        comm.Recv(recv, 0, TAG)
        comm.Send(send, 0, TAG)


def _bw_round(comm: MPI.Comm, send, recv, ack) -> None:
    if comm.Get_rank() == 0:
        MPI.Request.Waitall([comm.Isend(send, 1, TAG) for _ in range(BW_WINDOW)])
        comm.Recv(ack, 1, ACK_TAG)
    else:
        MPI.Request.Waitall([comm.Irecv(recv, 0, TAG) for _ in range(BW_WINDOW)])
        comm.Send(ack, 0, ACK_TAG)


def _bibw_round(comm: MPI.Comm, send, recv, ack) -> None:
    peer = 1 - comm.Get_rank()
    requests = [comm.Irecv(recv, peer, TAG) for _ in range(BW_WINDOW)]
    requests += [comm.Isend(send, peer, TAG) for _ in range(BW_WINDOW)]
    MPI.Request.Waitall(requests)


def _round_call(comm: MPI.Comm, benchmark: str, ack: np.ndarray) -> CollectiveCall:
    """One OSU round in the kernel's call signature (op and root unused)."""
    if benchmark == "latency":
        return lambda send, recv, op, root: latency_round(comm, send, recv)
    window_round = _bw_round if benchmark == "bw" else _bibw_round
    return lambda send, recv, op, root: window_round(comm, send, recv, ack)


def staged_messages(benchmark: str, rank: int) -> tuple[int, int]:
    """(sends, receives) of one round's messages on ``rank`` that carry the buffers: where
    MPI is not CUDA-aware each is staged by a copy of its own, as it would be alone (one
    copy pair for a whole bw window would charge 64 messages for one)."""
    if benchmark == "latency":
        return 1, 1
    if benchmark == "bw":
        return (BW_WINDOW, 0) if rank == 0 else (0, BW_WINDOW)
    return BW_WINDOW, BW_WINDOW


def _no_barrier() -> None:
    """OSU's point-to-point loops have no barrier between iterations."""


def measure_point_to_point(
    comm: MPI.Comm, cfg: BenchConfig, setting: Setting, topo: Topology
) -> Iterator[list[BenchRecord]]:
    """Yield one record per size; times are taken on rank 0 and shared with all ranks."""
    check_pair(comm.Get_size(), cfg.benchmark)
    rank, dtype = comm.Get_rank(), setting.etype.dtype
    if cfg.device == "cuda":
        select_local_gpu(comm)  # cached: the GPU bench chose, or chosen here
    # Point-to-point is MPI's: staged through host memory where MPI is not CUDA-aware.
    round_call = _round_call(comm, cfg.benchmark, np.zeros(1, np.int32))
    if needs_staging(cfg.device, "mpi"):
        round_call = staged(round_call, *staged_messages(cfg.benchmark, rank))
        if rank == 0:
            print(f"# {STAGING_NOTE}", flush=True)  # as the collectives' harness says it
    calls = [round_call]
    for size in cfg.sizes():
        n = size // setting.etype.itemsize
        if size and not n:
            continue
        iterations, warmup = cfg.iterations_for(size)
        send = setting.xp.asarray(input_values(rank, 0, n, dtype, None, 2))
        recv = setting.xp.zeros(n, dtype)
        device_ready(send, recv)  # the fill and the memset are kernels MPI must not race
        bufs, warm, timed = Buffers(send, recv), np.zeros((1, warmup)), np.zeros((1, iterations))
        comm.Barrier()
        timed_round(_no_barrier, calls, [0], bufs, None, [0] * warmup, warm)
        timed_round(_no_barrier, calls, [0], bufs, None, [0] * iterations, timed)
        times = timed[0]
        comm.Bcast(times, 0)
        wrong = None
        if cfg.validate:
            expected = input_values(1 - rank, 0, n, dtype, None, 2)
            mine = (
                0
                if cfg.benchmark == "bw" and rank == 0
                else count_wrong(recv, expected, setting.etype)
            )
            wrong = int(comm.allreduce(mine))
        yield [_p2p_record(cfg, setting, topo, size, n, times, iterations, wrong)]


def _p2p_record(
    cfg: BenchConfig,
    setting: Setting,
    topo: Topology,
    size: int,
    n: int,
    times: np.ndarray,
    iterations: int,
    wrong: int | None,
) -> BenchRecord:
    if cfg.benchmark == "latency":
        per_message = times / 2  # a round trip carries the message twice
        bandwidth = None
    else:
        messages = BW_WINDOW * (2 if cfg.benchmark == "bibw" else 1)
        per_message = times / messages
        total = times.sum()
        bandwidth = size * messages * iterations / total / 1e6 if total > 0 else 0.0
    us = per_message * 1e6
    avg = float(us.mean()) if us.size else 0.0
    gbs = size / (avg * 1e-6) / 1e9 if avg > 0 else 0.0
    return BenchRecord(
        collective=cfg.benchmark,
        algorithm="native",
        backend="mpi",
        dtype=setting.etype.name,
        op=None,
        size_bytes=size,
        count=n,
        nprocs=topo.nprocs,
        nodes=topo.nodes,
        ppn=topo.ppn,
        device=cfg.device,
        in_place=False,
        root=None,
        avg_us=avg,
        min_us=float(us.min()) if us.size else 0.0,
        max_us=float(us.max()) if us.size else 0.0,
        p50_us=float(np.percentile(us, 50)) if us.size else 0.0,
        p99_us=float(np.percentile(us, 99)) if us.size else 0.0,
        iterations=iterations,
        algbw_gbs=gbs,
        busbw_gbs=gbs,
        validation=None if wrong is None else ("fail" if wrong else "pass"),
        wrong_elements=wrong,
        bandwidth_mbs=bandwidth,
        iter_max_us=tuple(round(float(t), 3) for t in us),
    )
