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
from osu_dl_bench.measurement.bench_config import BW_WINDOW, BenchConfig
from osu_dl_bench.measurement.harness import Setting
from osu_dl_bench.measurement.kernel import count_wrong, timed_round
from osu_dl_bench.measurement.records import BenchRecord
from osu_dl_bench.runtime.topology import Topology

TAG = 1
ACK_TAG = 2


def check_pair(nprocs: int, benchmark: str) -> None:
    """OSU's point-to-point tests need exactly two processes."""
    if nprocs != 2:
        raise UsageError(f"{benchmark} needs exactly 2 processes, got {nprocs}")


# The two ranks of a test: the first starts the ping-pong and sends bw's window.
FIRST_PAIR = (0, 1)


def latency_round(comm: MPI.Comm, send, recv, pair: tuple[int, int] = FIRST_PAIR) -> None:
    """One ping-pong between the ranks of ``pair``, the first starting it (osu_latency.c's
    loop body)."""
    first, second = pair
    if comm.Get_rank() == first:
        comm.Send(send, second, TAG)
        comm.Recv(recv, second, TAG)
    else:
        comm.Recv(recv, first, TAG)
        comm.Send(send, first, TAG)


def _bw_round(comm: MPI.Comm, send, recv, ack, pair: tuple[int, int]) -> None:
    first, second = pair
    if comm.Get_rank() == first:
        MPI.Request.Waitall([comm.Isend(send, second, TAG) for _ in range(BW_WINDOW)])
        comm.Recv(ack, second, ACK_TAG)
    else:
        MPI.Request.Waitall([comm.Irecv(recv, first, TAG) for _ in range(BW_WINDOW)])
        comm.Send(ack, first, ACK_TAG)


def _bibw_round(comm: MPI.Comm, send, recv, ack, pair: tuple[int, int]) -> None:
    peer = pair[1] if comm.Get_rank() == pair[0] else pair[0]
    requests = [comm.Irecv(recv, peer, TAG) for _ in range(BW_WINDOW)]
    requests += [comm.Isend(send, peer, TAG) for _ in range(BW_WINDOW)]
    MPI.Request.Waitall(requests)


def pair_round(
    comm: MPI.Comm, benchmark: str, ack: np.ndarray, pair: tuple[int, int] = FIRST_PAIR
) -> CollectiveCall:
    """One OSU round between the ranks of ``pair`` (bw: the first sends) in the kernel's
    call signature (op and root unused); both ranks of the pair call it."""
    if benchmark == "latency":
        return lambda send, recv, op, root: latency_round(comm, send, recv, pair)
    window_round = _bw_round if benchmark == "bw" else _bibw_round
    return lambda send, recv, op, root: window_round(comm, send, recv, ack, pair)


def time_pair(
    round_call: CollectiveCall, bufs: Buffers, warmup: int, iterations: int
) -> np.ndarray:
    """Seconds of each of ``iterations`` rounds after ``warmup`` untimed ones, back to back
    through the kernel's loop, as this rank saw them (the pair's first rank: OSU's)."""
    warm, timed = np.zeros((1, warmup)), np.zeros((1, iterations))
    timed_round(_no_barrier, [round_call], [0], bufs, None, [0] * warmup, warm)
    timed_round(_no_barrier, [round_call], [0], bufs, None, [0] * iterations, timed)
    return timed[0]


def messages_per_round(benchmark: str) -> int:
    """Messages one round carries: a ping-pong's two, a window (each way for bibw)."""
    if benchmark == "latency":
        return 2
    return BW_WINDOW * (2 if benchmark == "bibw" else 1)


def bandwidth_mbs(benchmark: str, size: int, times: np.ndarray) -> float:
    """OSU's bandwidth of rounds that took ``times`` seconds: bytes sent over the total
    time, in MB/s (1 MB = 1e6 B); 0 where no time passed."""
    total = float(np.sum(times))
    return size * messages_per_round(benchmark) * len(times) / total / 1e6 if total > 0 else 0.0


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
    round_call = pair_round(comm, cfg.benchmark, np.zeros(1, np.int32))
    if needs_staging(cfg.device, "mpi"):
        round_call = staged(round_call, *staged_messages(cfg.benchmark, rank))
        if rank == 0:
            print(f"# {STAGING_NOTE}", flush=True)  # as the collectives' harness says it
    for size in cfg.sizes():
        n = size // setting.etype.itemsize
        if size and not n:
            continue
        iterations, warmup = cfg.iterations_for(size)
        send = setting.xp.asarray(input_values(rank, 0, n, dtype, None, 2))
        recv = setting.xp.zeros(n, dtype)
        device_ready(send, recv)  # the fill and the memset are kernels MPI must not race
        comm.Barrier()
        times = time_pair(round_call, Buffers(send, recv), warmup, iterations)
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
    # A round trip carries the message twice; a window BW_WINDOW times (each way, bibw).
    per_message = times / messages_per_round(cfg.benchmark)
    bandwidth = None if cfg.benchmark == "latency" else bandwidth_mbs(cfg.benchmark, size, times)
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
