"""The calibration job: the link and reduction throughput of one node with p ranks active.

    mpiexec -n P python -m osu_dl_bench.model.calibrate RUN_DIR [-m 8:64M] [--rounds 10]
        [--append]

Writes RUN_DIR/calibration.csv (``kind, size_bytes, nprocs, median_s, q1_s, q3_s,
samples, job``) and RUN_DIR/calibration.json (host, MPI library, cores, date, command);
``--append`` adds a job to an earlier calibration (the fit takes, per process count, kind
and size, the median over jobs). One job per process count of the sweep to be predicted:
each measures the contention state of p ranks on the node (on a 2-core node 3 or 4 ranks
time-share the cores, and what a message costs then is set by the scheduler, not by the
memory bus). Kinds, every rank taking part at once:

- ``exchange``: one step of a ring, every rank Sendrecv to its right neighbour and from its
  left one (mpi4py's buffer calls, as the algorithms use them): alpha and beta of the
  intra-node link with all p ranks active (on an oversubscribed node, mostly the cost of
  waiting for a descheduled peer);
- ``pingpong`` (p = 2 only): the one-way time of OSU's ping-pong (bench.p2p's round), for
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
  library's own shared-memory collectives.

Every sample reuses the same buffers, as the OSU-style benchmark and the sweep do (their
iterations run on one send and one receive buffer): what is timed is the cache state the
sweep's times see, warm up to the caches' size. Kinds are interleaved in rounds (the
machine changes speed over time) and medians over all samples are kept; the iterations per
round adapt to about TARGET_SECONDS per kind and size.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform as _platform
import sys
from pathlib import Path

import numpy as np

from osu_dl_bench.runtime import utc_now

CALIBRATION_CSV = "calibration.csv"
CALIBRATION_JSON = "calibration.json"
FIELDS = ("kind", "size_bytes", "nprocs", "median_s", "q1_s", "q3_s", "samples", "job")
KINDS = ("exchange", "pingpong", "reduce", "reduce_mpi", "step", "barrier")
STEP_MAX_BYTES = 4096  # the step's overhead matters (and is measured) at small sizes only
POOL_DEPTH = 1  # the benchmark reuses one send and one receive buffer: so does the calibration
POOL_CAP_BYTES = 256 << 20  # per kind and rank: fewer buffers for the largest sizes
TARGET_SECONDS = 2e-3  # per kind and round at each size
MAX_ITERATIONS = 200


def _pool(size: int, dtype: np.dtype) -> list[np.ndarray]:
    depth = max(1, min(POOL_DEPTH, POOL_CAP_BYTES // max(size, 1)))
    count = max(1, size // dtype.itemsize)
    # Zeros written explicitly: real pages (not the shared zero page), and sums that never
    # overflow however often a buffer is reduced into.
    return [np.full(count, 0.0, dtype) for _ in range(depth)]


def _iterations(seconds: float) -> int:
    """Enough iterations of a ``seconds``-long sample for about TARGET_SECONDS, at least 3."""
    return int(np.clip(TARGET_SECONDS / max(seconds, 1e-9), 3, MAX_ITERATIONS))


def _timed(comm, body, count: int) -> np.ndarray:
    """Seconds of ``body(i)`` for i < count, each after a barrier; the slower rank's."""
    from mpi4py import MPI

    times = np.empty(count)
    for i in range(count):
        comm.Barrier()
        start = MPI.Wtime()
        body(i)
        times[i] = MPI.Wtime() - start
    comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)
    return times


def _kinds(comm, size: int, send: list, recv: list):
    """kind -> (body(i), seconds per sample factor) for this size and process count."""
    from mpi4py import MPI

    from osu_dl_bench.measurement.p2p import latency_round  # OSU's ping-pong round, reused as is

    rank, p, depth = comm.Get_rank(), comm.Get_size(), len(send)
    right, left = (rank + 1) % p, (rank - 1) % p

    def exchange(i: int) -> None:
        comm.Sendrecv(send[i % depth], right, 11, recv[i % depth], left, 11)

    def pingpong(i: int) -> None:
        latency_round(comm, send[i % depth], recv[i % depth])

    def reduce(i: int) -> None:
        np.add(recv[i % depth], send[i % depth], out=recv[i % depth])

    def reduce_mpi(i: int) -> None:
        MPI.SUM.Reduce_local(send[i % depth], recv[i % depth])

    def step(i: int) -> None:
        buf, tmp = recv[i % depth], send[i % depth]
        half = len(buf) // 2 or 1
        comm.Sendrecv(buf[:half], right, 11, tmp[:half], left, 11)
        np.add(buf[:half], tmp[:half], out=buf[:half])

    def barrier(i: int) -> None:
        comm.Barrier()

    kinds = {"exchange": (exchange, 1.0), "reduce": (reduce, 1.0), "reduce_mpi": (reduce_mpi, 1.0)}
    if p == 2:
        kinds["pingpong"] = (pingpong, 0.5)  # a round trip carries 2 messages
    if size <= STEP_MAX_BYTES:
        kinds["step"] = (step, 1.0)
        kinds["barrier"] = (barrier, 1.0)
    return kinds


def _size_rows(comm, size: int, rounds: int) -> list[dict]:
    """Rows of one size: every kind in rotated order, ``rounds`` times."""
    send, recv = _pool(size, np.dtype(np.float32)), _pool(size, np.dtype(np.float32))
    kinds = _kinds(comm, size, send, recv)
    counts = {}
    for name, (body, _) in kinds.items():
        _timed(comm, body, 2)  # warm-up: first touch of the pages
        counts[name] = _iterations(float(np.median(_timed(comm, body, 3))))
    samples: dict[str, list[np.ndarray]] = {k: [] for k in kinds}
    names = list(kinds)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            body, factor = kinds[name]
            samples[name].append(_timed(comm, body, counts[name]) * factor)
    rows = []
    for name, parts in samples.items():
        t = np.concatenate(parts)
        q1, med, q3 = np.percentile(t, [25, 50, 75])
        values = (name, size, comm.Get_size(), med, q1, q3, t.size, 0)
        rows.append(dict(zip(FIELDS, values, strict=True)))
    return rows


def measure(comm, sizes: list[int], rounds: int) -> list[dict]:
    """Rows of calibration.csv (every rank gets the same)."""
    return [row for size in sizes for row in _size_rows(comm, size, rounds)]


def write_calibration(run_dir: Path, rows: list[dict], meta: dict, append: bool) -> None:
    """calibration.csv and calibration.json in ``run_dir``; ``append`` adds this job's rows
    (and its metadata to the list of jobs) to an earlier calibration's, so calibrations
    spread over a sweep's duration see the machine in the states the sweep saw."""
    run_dir.mkdir(parents=True, exist_ok=True)
    csv_path, meta_path = run_dir / CALIBRATION_CSV, run_dir / CALIBRATION_JSON
    append = append and csv_path.exists() and meta_path.exists()
    jobs = json.loads(meta_path.read_text()).get("jobs", []) if append else []
    for row in rows:
        row["job"] = len(jobs)
    with open(csv_path, "a" if append else "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if not append:
            writer.writeheader()
        writer.writerows(rows)
    meta_path.write_text(json.dumps({**meta, "jobs": [*jobs, meta]}, indent=1) + "\n")


def _metadata(comm) -> dict:
    from mpi4py import MPI

    return {
        "schema_version": 2,
        "nprocs": comm.Get_size(),
        "hosts": sorted(set(comm.allgather(MPI.Get_processor_name()))),
        "cores_per_node": os.cpu_count(),
        "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
        "pool_depth": POOL_DEPTH,
        "date": utc_now(),
        "platform": _platform.platform(),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="osu_dl_bench.model.calibrate")
    parser.add_argument("run_dir")
    parser.add_argument("-m", "--message-size", default="8:64M")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--append", action="store_true", help="add to RUN_DIR's calibration")
    return parser.parse_args(argv)


def calibrate(comm, args: argparse.Namespace) -> int:
    """Measure this job's ranks and write (rank 0) the calibration into args.run_dir."""
    from collectives.units import doubling_sizes
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.measurement.options import parse_size_range

    sizes = doubling_sizes(*parse_size_range(args.message_size, 8))
    if comm.Get_size() < 2:
        raise UsageError(f"the calibration job needs at least 2 ranks, got {comm.Get_size()}")
    meta = _metadata(comm)
    if len(meta["hosts"]) != 1:
        raise UsageError(f"the calibration job measures one node, got hosts {meta['hosts']}")
    rows = measure(comm, sizes, max(1, args.rounds))
    if comm.Get_rank() == 0:
        write_calibration(Path(args.run_dir), rows, meta, args.append)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the calibration job (p >= 2 ranks on one node)."""
    from osu_dl_bench.jobs.entry import run_in_job

    args = _parse(argv)
    return run_in_job(lambda comm: calibrate(comm, args))


if __name__ == "__main__":
    raise SystemExit(main())
