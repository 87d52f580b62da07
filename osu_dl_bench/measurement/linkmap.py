"""bench linkmap: point-to-point latency and bandwidth between every pair of nodes.

One leader per node (its lowest rank) measures; the other ranks wait without spinning.
The pairs follow a round-robin schedule (the circle method: node 0 stays, the others
rotate by one place per step), so every step pairs each node with at most one other and
the pairs of a step can run at once without sharing a node; N - 1 steps (N for odd N, each
node sitting one out) meet every pair once. The whole cycle repeats ``repetitions``
times, so a change in the machine's speed during the run hits every link alike and each
link has one sample per cycle.

Each step has three phases, the leaders meeting between them (so no pair's bulk traffic
overlaps another pair's latency). First an 8 B ping-pong (osu_latency.c's round, p2p's
``latency_round``; a sample is the median one-way time of LATENCY_ITERATIONS rounds),
the pairs of the step one after another: a sample takes about a millisecond, so this
costs N/2 ms a step, and a ping-pong measured beside another competes with it for cores
wherever nodes share them (measured on the cluster on one machine, 4 nodes on 2 cores:
the two pairs of a step ping-ponging at once took 300-700 us one way instead of 10 in
3 of 10 runs, always the same step's two pairs, whose links were then named). Then OSU's
bw each way, the pairs at once (osu_bw.c's window of BW_WINDOW messages, p2p's bw
round: a sample is ``windows`` windows from one node to the other), first from the lower
node to the higher, then back. Both directions, because a link can be slow one way only
(a shaped egress, a half-duplex port).

Returns raw samples on rank 0; naming links that stand out is diagnosis.linkmap's job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from collectives import Buffers
from collectives.topology import RANKS_PER_NODE_ENV, emulated_ranks_per_node, split_nodes
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.bench_config import BW_WINDOW
from osu_dl_bench.measurement.kernel import FAULT_ENV
from osu_dl_bench.measurement.p2p import bandwidth_mbs, pair_round, time_pair
from osu_dl_bench.runtime.rank_agreement import wait_politely

# The latency message: one double, as nccl-tests' smallest point; osu_latency reports 0 B
# up, and 0-8 B take the same path (eager, one packet).
LATENCY_BYTES = 8
# Rounds per latency sample and untimed ones before them: the median of 100 one-way times
# is steady to a few percent on a loaded host, and 100 round trips over a shaped 1 Gbit/s
# link take ~5 ms (osu_latency runs 10000 rounds, but once per size, not once per link
# and cycle).
LATENCY_ITERATIONS = 100
LATENCY_WARMUP = 10
# A leader waiting for the others between phases sleeps this long between tests of the
# barrier (the phases are not timed: the pause costs nothing measured).
PHASE_PAUSE_S = 0.001


@dataclass(frozen=True)
class LinkSettings:
    """What one linkmap run measures: the bandwidth message size and windows per sample,
    the untimed windows before each sample, and the cycles over all pairs."""

    message_bytes: int
    windows: int
    warmup_windows: int
    repetitions: int

    def as_dict(self) -> dict[str, int]:
        """Every setting, the fixed ones included, for the record."""
        return {
            "message_bytes": self.message_bytes,
            "window": BW_WINDOW,
            "windows": self.windows,
            "warmup_windows": self.warmup_windows,
            "repetitions": self.repetitions,
            "latency_bytes": LATENCY_BYTES,
            "latency_iterations": LATENCY_ITERATIONS,
            "latency_warmup": LATENCY_WARMUP,
        }


@dataclass(frozen=True)
class LinkSamples:
    """What the leaders measured: per pair of nodes (a < b) the one-way latency samples in
    microseconds; per ordered pair (source, target) the bandwidth samples in MB/s (1 MB =
    1e6 B, OSU's); one sample per cycle, in cycle order. Nodes are indices into ``hosts``."""

    hosts: tuple[str, ...]
    leaders: tuple[int, ...]  # each node's leader, a rank of the measured communicator
    settings: LinkSettings
    latency_us: dict[tuple[int, int], tuple[float, ...]]
    bandwidth_mbs: dict[tuple[int, int], tuple[float, ...]]


def round_robin(nodes: int) -> list[list[tuple[int, int]]]:
    """The circle method's steps for ``nodes`` nodes: each step a list of pairs (a < b) that
    share no node; over all steps every pair meets exactly once (odd counts: one node sits
    out each step)."""
    if nodes < 2:
        return []
    seats: list[int | None] = list(range(nodes)) + ([None] if nodes % 2 else [])
    steps = []
    for _ in range(len(seats) - 1):
        facing = zip(seats[: len(seats) // 2], reversed(seats), strict=False)
        pairs = [(min(a, b), max(a, b)) for a, b in facing if a is not None and b is not None]
        steps.append(sorted(pairs))
        seats = [seats[0], seats[-1], *seats[1:-1]]  # node 0 stays; the others move one seat
    return steps


def node_names(hosts: list[str]) -> tuple[str, ...]:
    """Each node's name: its leader's host, numbered where several nodes share one host
    (nodes emulated with --ranks-per-node)."""
    if len(set(hosts)) == len(hosts):
        return tuple(hosts)
    return tuple(f"{host}:{i}" for i, host in enumerate(hosts))


def check_nodes(hosts: tuple[str, ...], nprocs: int) -> None:
    """A link needs two nodes: one clear message where MPI reports only one."""
    if len(hosts) < 2:
        ranks = f"{nprocs} rank{'' if nprocs == 1 else 's'}"
        emulated = emulated_ranks_per_node()
        if emulated is not None:  # the emulation was asked for: suggesting it helps no one
            raise UsageError(
                f"linkmap measures the links between nodes: --ranks-per-node {emulated} "
                f"(or {RANKS_PER_NODE_ENV}) puts the job's {ranks} on one emulated node; "
                f"give fewer ranks per node than ranks, or launch across nodes",
                agreed=True,
            )
        raise UsageError(
            f"linkmap measures the links between nodes: MPI reports one node ({hosts[0]}) "
            f"for the job's {ranks}; launch across nodes "
            "(mpiexec -hosts, srun -N) or emulate nodes on one host with --ranks-per-node",
            agreed=True,
        )


def _pair_of(step: list[tuple[int, int]], node: int) -> tuple[int, int] | None:
    return next((pair for pair in step if node in pair), None)


def _measure_as_leader(
    leaders: MPI.Comm, settings: LinkSettings
) -> tuple[dict[tuple[int, int], list[float]], dict[tuple[int, int], list[float]]]:
    """This leader's part of every cycle; the samples it timed (as the pair's first rank,
    OSU's timer: the one that starts the ping-pong or sends the window)."""
    me = leaders.Get_rank()
    ack = np.zeros(1, np.int32)
    small = Buffers(np.ones(LATENCY_BYTES, np.uint8), np.zeros(LATENCY_BYTES, np.uint8))
    large = Buffers(
        np.ones(settings.message_bytes, np.uint8), np.zeros(settings.message_bytes, np.uint8)
    )
    latency: dict[tuple[int, int], list[float]] = {}
    bandwidth: dict[tuple[int, int], list[float]] = {}
    steps = round_robin(leaders.Get_size())
    for _ in range(settings.repetitions):
        for step in steps:
            if os.environ.get(FAULT_ENV) == "raise" and me == leaders.Get_size() - 1:
                raise RuntimeError("fault injected on the last node's leader (test hook)")
            pair = _pair_of(step, me)
            for turn in step:  # latency: one pair at a time (see the module's docstring)
                if turn == pair:
                    call = pair_round(leaders, "latency", ack, pair)
                    times = time_pair(call, small, LATENCY_WARMUP, LATENCY_ITERATIONS)
                    if me == pair[0]:
                        one_way_us = float(np.median(times)) / 2 * 1e6
                        latency.setdefault(pair, []).append(one_way_us)
                wait_politely(leaders, PHASE_PAUSE_S)
            for direction in (pair, pair[::-1]) if pair else (None, None):
                if direction is not None:
                    call = pair_round(leaders, "bw", ack, direction)
                    times = time_pair(call, large, settings.warmup_windows, settings.windows)
                    if me == direction[0]:
                        sample = bandwidth_mbs("bw", settings.message_bytes, times)
                        bandwidth.setdefault(direction, []).append(sample)
                wait_politely(leaders, PHASE_PAUSE_S)
    return latency, bandwidth


def measure_links(comm: MPI.Comm, settings: LinkSettings) -> LinkSamples | None:
    """Every pair of nodes' latency and bandwidth samples (on rank 0; None elsewhere).
    Collective over ``comm``; nodes from MPI (or --ranks-per-node's emulation, set
    before)."""
    nodes = split_nodes(comm)
    is_leader = nodes.leaders != MPI.COMM_NULL
    # Rank 0 is its node's lowest rank, so the first leader: it gathers.
    found = None
    if is_leader:
        hosts = nodes.leaders.gather(MPI.Get_processor_name(), root=0)
        ranks = nodes.leaders.gather(comm.Get_rank(), root=0)
        found = (node_names(hosts), tuple(ranks)) if comm.Get_rank() == 0 else None
    names, ranks = comm.bcast(found, root=0)
    check_nodes(names, comm.Get_size())
    parts = None
    if is_leader:
        parts = nodes.leaders.gather(_measure_as_leader(nodes.leaders, settings), root=0)
        nodes.leaders.Free()
    nodes.local.Free()
    wait_politely(comm)  # the other ranks of each node idle here, off the cores
    if comm.Get_rank() != 0:
        return None
    latency, bandwidth = {}, {}
    for part_latency, part_bandwidth in parts:
        latency.update({pair: tuple(v) for pair, v in part_latency.items()})
        bandwidth.update({pair: tuple(v) for pair, v in part_bandwidth.items()})
    return LinkSamples(names, ranks, settings, latency, bandwidth)
