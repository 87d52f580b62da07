"""Per-rank timing: when each rank entered each timed call (its arrival) and when it left,
on one clock, and per rank what that says (how late it arrives, how long it waits for the
others, how long its calls take).

The kernel stamps each call's start on the rank's own clock (``timed_round``'s
``arrivals``); durations are the times it already keeps. Clocks of different nodes differ
by an offset, so each rank's offset to rank 0's clock is estimated once per launch by
ping-pong: rank 0 reads its clock, the peer its own on receipt, rank 0 again on the reply,
and the exchange with the shortest round trip gives offset = peer - midpoint (Cristian,
"Probabilistic clock synchronization", Distributed Computing 3, 1989); its error is at
most half that round trip, the residual stated with every result. ReproMPI does the same
per launch (Hunold and Carpen-Amarie, "Reproducible MPI benchmarking is still not as
easy as you think", IEEE TPDS 27(12), 2016), with a drift model on top that runs of a few
seconds per point do not need.

Per rank, over the calls of one candidate at one point:
- ``lag``: its arrival after the earliest rank's (0 for whoever came first);
- ``wait``: the last rank's arrival after its own, the time it spends waiting for others
  (no collective that needs every rank's data can end before the last one arrives);
- ``finish``: its completion after the earliest rank's;
- its own call times' median and 99th percentile.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from mpi4py import MPI

SYNC_TAG = 7
# Ping-pongs per peer: the shortest round trip of 20 is within a few microseconds of the
# best possible on an idle link.
SYNC_EXCHANGES = 20


@dataclass(frozen=True)
class ClockSync:
    """Each rank's clock minus rank 0's, in seconds, and the bound on their error."""

    offsets: np.ndarray
    residual: float

    def to_rank0(self, stamps: np.ndarray) -> np.ndarray:
        """Stamps of shape (ranks, ...) moved onto rank 0's clock."""
        shape = (len(self.offsets),) + (1,) * (stamps.ndim - 1)
        return stamps - self.offsets.reshape(shape)


def _ping(comm: MPI.Comm, peer: int) -> tuple[float, float]:
    """Rank 0's side: (offset of peer, round trip) of the shortest exchange."""
    stamp, best = np.zeros(1), (0.0, np.inf)
    for _ in range(SYNC_EXCHANGES):
        sent = MPI.Wtime()
        comm.Send(stamp, peer, SYNC_TAG)
        comm.Recv(stamp, peer, SYNC_TAG)
        back = MPI.Wtime()
        if back - sent < best[1]:
            best = (float(stamp[0]) - (sent + back) / 2, back - sent)
    return best


def _pong(comm: MPI.Comm) -> None:
    stamp = np.zeros(1)
    for _ in range(SYNC_EXCHANGES):
        comm.Recv(stamp, 0, SYNC_TAG)
        stamp[0] = MPI.Wtime()
        comm.Send(stamp, 0, SYNC_TAG)


def synchronise_clocks(comm: MPI.Comm) -> ClockSync:
    """Every rank's clock offset to rank 0's (collective; peers one at a time, so no
    exchange waits behind another)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    found = np.zeros((size, 2))
    for peer in range(1, size):
        if rank == 0:
            found[peer] = _ping(comm, peer)
        elif rank == peer:
            _pong(comm)
    comm.Bcast(found, root=0)
    return ClockSync(found[:, 0].copy(), float(found[:, 1].max() / 2))


@dataclass(frozen=True)
class RankSummary:
    """One rank over one candidate's timed calls at one point, in microseconds."""

    rank: int
    node: str
    lag_us: float
    wait_us: float
    finish_us: float
    p50_us: float
    p99_us: float
    last_share: float  # how often it was the last to arrive

    def as_dict(self) -> dict:
        """The summary as JSON-ready fields."""
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


SUMMARY_FIELDS = ("lag_us", "wait_us", "finish_us", "p50_us", "p99_us", "last_share")


def summarise(
    own: np.ndarray, duration: np.ndarray, first: np.ndarray, last: np.ndarray, done: np.ndarray
) -> np.ndarray:
    """One rank's summary per candidate, SUMMARY_FIELDS in that order: from its arrivals
    ``own`` and call times, and per call the earliest and latest arrival and the earliest
    completion over all ranks (arrays of shape (candidates, calls), seconds)."""
    columns = (
        np.median(own - first, axis=-1) * 1e6,
        np.median(last - own, axis=-1) * 1e6,
        np.median(own + duration - done, axis=-1) * 1e6,
        np.percentile(duration, 50, axis=-1) * 1e6,
        np.percentile(duration, 99, axis=-1) * 1e6,
        np.mean(own == last, axis=-1),
    )
    return np.stack(columns, axis=-1)


def summaries_of(table: np.ndarray, nodes: tuple[str, ...]) -> list[RankSummary]:
    """RankSummary per rank from a (ranks, SUMMARY_FIELDS) table."""
    return [
        RankSummary(r, nodes[r] if r < len(nodes) else "", *map(float, row))
        for r, row in enumerate(table)
    ]


def rank_summaries(
    comm: MPI.Comm, arrivals: np.ndarray, durations: np.ndarray, clock: ClockSync
) -> np.ndarray | None:
    """On rank 0, every rank's summary per candidate, shape (candidates, ranks,
    SUMMARY_FIELDS); None elsewhere. Each rank summarises its own calls (the earliest and
    latest arrival and the earliest completion of each call come by Allreduce), so rank 0
    receives a few numbers per rank, never every rank's stamps. ``arrivals`` and
    ``durations``: this rank's (candidates, calls) arrays on its own clock."""
    own = np.ascontiguousarray(arrivals - clock.offsets[comm.Get_rank()])
    done = own + durations
    first, last, earliest = np.empty_like(own), np.empty_like(own), np.empty_like(own)
    comm.Allreduce(own, first, MPI.MIN)
    comm.Allreduce(own, last, MPI.MAX)
    comm.Allreduce(done, earliest, MPI.MIN)
    local = np.ascontiguousarray(summarise(own, durations, first, last, earliest))
    table = np.empty((comm.Get_size(), *local.shape)) if comm.Get_rank() == 0 else None
    comm.Gather(local, table, root=0)
    return None if table is None else table.transpose(1, 0, 2)


@dataclass(frozen=True)
class RankTimes:
    """Every rank's arrivals and call times of one candidate at one point, in seconds,
    arrivals on rank 0's clock: arrays of shape (ranks, calls)."""

    arrival: np.ndarray
    duration: np.ndarray

    def raw(self) -> dict[str, list[list[float]]]:
        """The per-rank arrays in microseconds, arrivals from the earliest stamp."""
        start = float(self.arrival.min()) if self.arrival.size else 0.0
        return {
            "arrival_us": np.round((self.arrival - start) * 1e6, 3).tolist(),
            "duration_us": np.round(self.duration * 1e6, 3).tolist(),
        }


def gather_rank_times(
    comm: MPI.Comm, arrivals: np.ndarray, durations: np.ndarray, clock: ClockSync
) -> list[RankTimes] | None:
    """On rank 0, per candidate, every rank's stamps on rank 0's clock; None elsewhere.
    ``arrivals`` and ``durations``: this rank's (candidates, ...) arrays."""
    local = np.ascontiguousarray(np.stack([arrivals, durations]))
    gathered = np.empty((comm.Get_size(), *local.shape)) if comm.Get_rank() == 0 else None
    comm.Gather(local, gathered, root=0)
    if gathered is None:
        return None
    candidates = local.shape[1]
    flat = gathered.reshape(comm.Get_size(), 2, candidates, -1)
    arrival = clock.to_rank0(flat[:, 0])
    return [RankTimes(arrival[:, j], flat[:, 1, j]) for j in range(candidates)]
