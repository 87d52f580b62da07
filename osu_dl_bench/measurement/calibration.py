"""The model's calibration kernels: the link and reduction costs of one node with p ranks
active, and the machine's reference state they were measured in.

Two callers: the sweep runs ``run_calibration`` once in every launch of its "mpi" group
(a few seconds: sparse sizes, two rounds), so the parameters come from the same launches
and minutes as the times they predict; the standalone calibration job
(``python -m osu_dl_bench.commands.calibration_job``, launched by ``model fit
--calibrate``) runs ``run_calibration_job``, every doubling size with more rounds, for
runs without such rows: one job per process count of the sweep to be predicted, each
measuring the contention state of p ranks on the node (on a 2-core node 3 or 4 ranks
time-share the cores, and what a message costs then is set by the scheduler, not by the
memory bus).

RUN_DIR/calibration.csv has one row per (kind, size) and job: ``kind, size_bytes, nprocs,
median_s, q1_s, q3_s, samples, job`` (``job``: the launch's label, e.g. "p4-launch2", or
the standalone job's index); RUN_DIR/calibration.json the host, MPI library, cores, date
and command of the last job, and under "jobs" those of every job. The fit takes, per
process count, kind and size, the median over jobs. Kinds, every rank taking part at once:

- ``exchange``: one step of a ring, every rank Sendrecv to its right neighbour and from its
  left one (mpi4py's buffer calls, as the algorithms use them): alpha and beta of the
  intra-node link with all p ranks active (on an oversubscribed node, mostly the cost of
  waiting for a descheduled peer);
- ``pingpong`` (p = 2 only): the one-way time of OSU's ping-pong (measurement.p2p's round), for
  reference: one copy in flight, where a collective's steps have all ranks copying;
- ``reduce``: ``ufunc(a, b, out=a)`` on every rank at once (as the algorithms reduce: in
  place, sharing the cores and the memory bus): gamma;
- ``reduce_mpi``: ``MPI.SUM.Reduce_local`` likewise: the MPI library's own reduction,
  which native's algorithms use (MPICH's is a plain C loop, slower than numpy's vectorised
  ufunc on large arrays): gamma of native;
- ``step``: one step of our Python algorithms (the exchange of a slice, then the in-place
  ufunc on it) at small sizes: its excess over the exchange is the software overhead per
  step that the C library's native algorithms do not pay;
- ``barrier``: MPI_Barrier at small sizes (it has no payload): the synchronisation of the
  library's own shared-memory collectives;
- ``ref_copy``, ``ref_allreduce`` (size_bytes 0): the sweep's machine-state reference
  (measurement.reference: a 1 MiB copy, an 8-byte native allreduce), the slowest rank's,
  once per round of every size: the state the parameters describe, so that a prediction
  can be scaled to the state a sweep point was measured in.

Every sample reuses the same buffers, as the OSU-style benchmark and the sweep do (their
iterations run on one send and one receive buffer): what is timed is the cache state the
sweep's times see, warm up to the caches' size. Every sample is timed by the kernel's loop
(measurement.kernel.timed_round: an untimed barrier, the timer around the call alone), so
a stall report shows the calibration's calls too. Kinds are interleaved in rounds (the
machine changes speed over time) and medians over all samples are kept; the iterations per
round adapt to about ``target_s`` per kind and size. The files are written through the run
directory's store (measurement.store.RunStore): appended as results.csv is, or replaced
atomically.

mpi4py is imported inside the functions: the model reads this module's file names and
kinds in a process that must not start MPI.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform as _platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collectives.specs import Buffers
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.paths import CALIBRATION_CSV, CALIBRATION_JSON
from osu_dl_bench.runtime.metadata import COMMAND_KEY, command_line, library_version_line, utc_now
from osu_dl_bench.runtime.rank_agreement import on_rank0

FIELDS = ("kind", "size_bytes", "nprocs", "median_s", "q1_s", "q3_s", "samples", "job")
REFERENCE_KINDS = ("ref_copy", "ref_allreduce")
KINDS = ("exchange", "pingpong", "reduce", "reduce_mpi", "step", "barrier", *REFERENCE_KINDS)
STEP_MAX_BYTES = 4096  # the step's overhead matters (and is measured) at small sizes only
POOL_DEPTH = 1  # the benchmark reuses one send and one receive buffer: so does the calibration
MAX_ITERATIONS = 200

# The standalone job: every doubling size, 10 rounds of about 2 ms per kind.
TARGET_SECONDS = 2e-3
# In a sweep's launch (run_calibration): every fourth doubling size from 8 B to 8 MiB (11
# sizes, >= 3 per regime of the caches and of the library's protocols, the fit's minimum
# per piece) and 2 rounds of about 1 ms, one or two iterations at the largest sizes: 0.2-0.5
# s at p = 2, 0.3-0.9 s at p = 3 and 0.4-3 s at p = 4 on 2 cores (quiet, the first call of
# a process the slowest). A loaded node slows the oversubscribed kernels many times over
# (8.5 s measured at p = 4), so no new size starts after IN_LAUNCH_DEADLINE_S once the first
# MIN_SIZES are done: the sizes go spread over the range first (spread_order), and the
# sweep's launches add up (the fit takes medians over them).
IN_LAUNCH_SIZES = tuple(8 << (2 * k) for k in range(11))
IN_LAUNCH_ROUNDS = 2
IN_LAUNCH_TARGET_SECONDS = 1e-3
IN_LAUNCH_DEADLINE_S = 2.0
MIN_SIZES = 4  # the fit's least per kind and process count


@dataclass(frozen=True)
class Effort:
    """How long each kind is measured: rounds, seconds per kind and round, the fewest
    iterations per round (the largest sizes take longer than the target once), and the
    seconds after which no new size starts (None: every size)."""

    rounds: int = 10
    target_s: float = TARGET_SECONDS
    min_iterations: int = 3
    deadline_s: float | None = None


IN_LAUNCH = Effort(IN_LAUNCH_ROUNDS, IN_LAUNCH_TARGET_SECONDS, 1, IN_LAUNCH_DEADLINE_S)


def spread_order(sizes: Sequence[int]) -> list[int]:
    """The sizes in an order whose every prefix spans the range: every third size from the
    smallest, then the ones after those, then the rest (8, 512, 32K, 2M, 32, 2K, ...)."""
    ordered = sorted(sizes)
    return [n for start in range(3) for n in ordered[start::3]]


def _buffers(size: int) -> Buffers:
    """One float32 send and one receive buffer of ``size`` bytes, for every sample."""
    count = max(1, size // 4)
    # Zeros written explicitly: real pages (not the shared zero page), and sums that never
    # overflow however often a buffer is reduced into.
    return Buffers(np.full(count, 0.0, np.float32), np.full(count, 0.0, np.float32))


def _iterations(seconds: float, effort: Effort) -> int:
    """Iterations of a ``seconds``-long sample for about effort.target_s."""
    count = effort.target_s / max(seconds, 1e-9)
    return int(np.clip(count, effort.min_iterations, MAX_ITERATIONS))


def _timed(comm, call: Callable, bufs: Buffers, count: int) -> np.ndarray:
    """Seconds of ``count`` calls of ``call`` timed by the kernel's loop; the slowest rank's."""
    from osu_dl_bench.measurement.kernel import slowest_rank, timed_round

    times = np.zeros((1, count))
    timed_round(comm.Barrier, [call], [0], bufs, None, [0] * count, times)
    return slowest_rank(comm, times)[0]


def _kinds(comm, size: int) -> dict[str, tuple[Callable, float]]:
    """kind -> (call(send, recv, op, root), seconds per sample factor) for this size and
    process count; the calls take the kernel's signature and ignore ``op`` and ``root``."""
    from mpi4py import MPI

    from osu_dl_bench.measurement.p2p import latency_round  # OSU's ping-pong round, reused as is

    rank, p = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % p, (rank - 1) % p

    def exchange(send, recv, op, root) -> None:
        comm.Sendrecv(send, right, 11, recv, left, 11)

    def pingpong(send, recv, op, root) -> None:
        latency_round(comm, send, recv)

    def reduce(send, recv, op, root) -> None:
        np.add(recv, send, out=recv)

    def reduce_mpi(send, recv, op, root) -> None:
        MPI.SUM.Reduce_local(send, recv)

    def step(send, recv, op, root) -> None:
        half = len(recv) // 2 or 1
        comm.Sendrecv(recv[:half], right, 11, send[:half], left, 11)
        np.add(recv[:half], send[:half], out=recv[:half])

    def barrier(send, recv, op, root) -> None:
        comm.Barrier()

    kinds = {"exchange": (exchange, 1.0), "reduce": (reduce, 1.0), "reduce_mpi": (reduce_mpi, 1.0)}
    if p == 2:
        kinds["pingpong"] = (pingpong, 0.5)  # a round trip carries 2 messages
    if size <= STEP_MAX_BYTES:
        kinds["step"] = (step, 1.0)
        kinds["barrier"] = (barrier, 1.0)
    return kinds


def _row(kind: str, size: int, nprocs: int, times: np.ndarray) -> dict:
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    values = (kind, size, nprocs, float(med), float(q1), float(q3), int(times.size), 0)
    return dict(zip(FIELDS, values, strict=True))


class _References:
    """The machine-state reference, sampled once per round (the slowest rank's), or
    nothing when no timer is given."""

    def __init__(self, comm, timer) -> None:
        self.comm, self.timer = comm, timer
        self.samples: list[tuple[float, float]] = []

    def sample(self) -> None:
        if self.timer is not None:
            from mpi4py import MPI

            here = np.asarray(self.timer.sample(), float)
            self.comm.Allreduce(MPI.IN_PLACE, here, MPI.MAX)
            self.samples.append((float(here[0]), float(here[1])))

    def rows(self) -> list[dict]:
        if not self.samples:
            return []
        values = np.asarray(self.samples)
        p = self.comm.Get_size()
        return [_row(kind, 0, p, values[:, i]) for i, kind in enumerate(REFERENCE_KINDS)]


def _size_rows(comm, size: int, effort: Effort, refs: _References) -> list[dict]:
    """Rows of one size: every kind in rotated order, ``effort.rounds`` times."""
    bufs, kinds = _buffers(size), _kinds(comm, size)
    counts = {}
    for name, (call, _) in kinds.items():
        _timed(comm, call, bufs, 1)  # warm-up: first touch of the pages, the library's first call
        counts[name] = _iterations(float(np.max(_timed(comm, call, bufs, 1))), effort)
    samples: dict[str, list[np.ndarray]] = {k: [] for k in kinds}
    names = list(kinds)
    for r in range(effort.rounds):
        refs.sample()
        for name in names[r % len(names) :] + names[: r % len(names)]:
            call, factor = kinds[name]
            samples[name].append(_timed(comm, call, bufs, counts[name]) * factor)
    p = comm.Get_size()
    return [_row(name, size, p, np.concatenate(parts)) for name, parts in samples.items()]


def _in_time(comm, started: float, done: int, effort: Effort) -> bool:
    """Whether another size may start (rank 0's clock decides for every rank)."""
    from mpi4py import MPI

    if effort.deadline_s is None or done < MIN_SIZES:
        return True
    late = comm.Get_rank() == 0 and MPI.Wtime() - started > effort.deadline_s
    return not comm.bcast(late, root=0)


def measure(comm, sizes: Sequence[int], effort: Effort = Effort(), timer=None) -> list[dict]:
    """Rows of calibration.csv (every rank gets the same), by size; ``timer``: a
    measurement.reference.ReferenceTimer whose samples become the ref_* rows. With a
    deadline, the sizes go in spread_order and the last ones may be left out."""
    from mpi4py import MPI

    refs, started, rows = _References(comm, timer), MPI.Wtime(), []
    order = list(sizes) if effort.deadline_s is None else spread_order(sizes)
    for done, size in enumerate(order):
        if not _in_time(comm, started, done, effort):
            break
        rows += _size_rows(comm, size, effort, refs)
    rows.sort(key=lambda row: row["size_bytes"])  # stable: kinds keep their order
    return rows + refs.rows()


def write_calibration(
    run_dir: Path, rows: list[dict], meta: dict, append: bool, job: str | None = None
) -> None:
    """calibration.csv and calibration.json in ``run_dir``; ``append`` adds this job's rows
    (and its metadata to the list of jobs) to an earlier calibration's, so calibrations
    spread over a sweep's duration see the machine in the states the sweep saw. ``job``
    labels the rows (default: the job's index). The run directory's store writes them:
    the rows appended as results.csv's are, every other file replaced atomically."""
    store = RunStore(run_dir)
    store.create()
    csv_path, meta_path = run_dir / CALIBRATION_CSV, run_dir / CALIBRATION_JSON
    append = append and csv_path.exists() and meta_path.exists()
    jobs = json.loads(meta_path.read_text()).get("jobs", []) if append else []
    label = str(len(jobs)) if job is None else job
    labelled = [{**row, "job": label} for row in rows]
    if append:
        store.append_rows(CALIBRATION_CSV, FIELDS, labelled)
    else:
        store.write_rows(CALIBRATION_CSV, FIELDS, labelled)
    meta = {**meta, "job": label}
    store.write_text(CALIBRATION_JSON, json.dumps({**meta, "jobs": [*jobs, meta]}, indent=1) + "\n")


def metadata(comm) -> dict:
    """What the calibration ran on (every rank takes part: the host names are gathered)."""
    from mpi4py import MPI

    return {
        "schema_version": 2,
        "nprocs": comm.Get_size(),
        "hosts": sorted(set(comm.allgather(MPI.Get_processor_name()))),
        "cores_per_node": os.cpu_count(),
        "mpi_library": library_version_line(MPI),
        "pool_depth": POOL_DEPTH,
        "date": utc_now(),
        "platform": _platform.platform(),
        COMMAND_KEY: command_line(),
    }


def _append(run_dir: Path, rows: list[dict], meta: dict, job: str) -> None:
    """Append a launch's calibration; a failed write is a UsageError naming it."""
    try:
        write_calibration(run_dir, rows, meta, True, job)
    except OSError as exc:
        raise UsageError(f"cannot write the calibration: {exc}") from None


def run_calibration(
    comm,
    run_dir: Path,
    job: str,
    sizes: Sequence[int] = IN_LAUNCH_SIZES,
    effort: Effort = IN_LAUNCH,
) -> None:
    """Measure the calibration kernels and the reference state on ``comm`` (collective: every
    rank calls it) and append them (rank 0) to RUN_DIR's calibration, labelled ``job``.
    Nothing is measured on one rank (no peer to exchange with) or across hosts (the
    kernels describe one node)."""
    from osu_dl_bench.measurement.reference import ReferenceTimer

    meta = metadata(comm)
    if comm.Get_size() < 2 or len(meta["hosts"]) != 1:
        return
    rows = measure(comm, sizes, effort, ReferenceTimer(comm))
    on_rank0(comm, lambda: _append(Path(run_dir), rows, meta, job))


def run_calibration_job(comm, run_dir: str, message_size: str, rounds: int, append: bool) -> int:
    """The standalone calibration job: measure this job's ranks at every doubling size of
    ``message_size`` ('MIN:MAX') and write (rank 0) the calibration into ``run_dir``, or
    add it to the earlier ones (``append``)."""
    from collectives.units import doubling_sizes
    from osu_dl_bench.measurement.bench_config import parse_size_range
    from osu_dl_bench.measurement.reference import ReferenceTimer

    sizes = doubling_sizes(*parse_size_range(message_size, 8))
    if comm.Get_size() < 2:
        raise UsageError(f"the calibration job needs at least 2 ranks, got {comm.Get_size()}")
    meta = metadata(comm)
    # One node measures the intra-node link, one rank per node the inter-node one; a mix
    # would blend the two in one fit.
    if len(meta["hosts"]) not in (1, comm.Get_size()):
        raise UsageError(
            "the calibration job measures one node or one rank per node, got "
            f"{comm.Get_size()} ranks on hosts {meta['hosts']}"
        )
    with contextlib.ExitStack() as held:
        # Rank 0 holds the run directory's lock from before the first measurement to the
        # last write, as a sweep does: a sweep or another job using the directory makes
        # this one refuse at once, not after minutes of measuring, and never interleave.
        on_rank0(comm, lambda: held.enter_context(RunStore(run_dir).lock(option="RUN_DIR")))
        rows = measure(comm, sizes, Effort(rounds=max(1, rounds)), ReferenceTimer(comm))
        on_rank0(comm, lambda: write_calibration(Path(run_dir), rows, meta, append))
    return 0
