"""The calibration job: point-to-point and reduction throughput on 2 ranks of one node.

    mpiexec -n 2 python -m osu_dl_bench.model.calibrate RUN_DIR [-m 8:16M] [--rounds 10]
        [--append]

Writes RUN_DIR/calibration.csv (``kind, size_bytes, nprocs, median_s, q1_s, q3_s,
samples, job``) and RUN_DIR/calibration.json (host, MPI library, cores, date, command);
``--append`` adds a job to an earlier calibration (the fit takes, per kind and size, the
median over jobs). Kinds:

- ``pingpong``: one-way time of OSU's ping-pong (bench.p2p's round, through mpi4py's
  buffer calls as the algorithms use them): alpha and beta of the intra-node link;
- ``reduce``: ``ufunc(a, b, out=a)`` on both ranks at once (as the algorithms reduce:
  in place, every rank together, sharing the memory bus): gamma;
- ``reduce_mpi``: ``MPI.SUM.Reduce_local`` likewise: the MPI library's own reduction,
  which native's algorithms use (MPICH's is a plain C loop, several times slower than
  numpy's vectorised ufunc on large arrays): gamma of native;
- ``step``: one step of our Python algorithms (Sendrecv of a slice, then the in-place
  ufunc on it) at small sizes: its excess over the ping-pong is the software overhead per
  step that the C library's native algorithms do not pay.

Buffers rotate through a pool of ``POOL_DEPTH`` per kind, because a sweep interleaves
several candidates whose scratch and the shared inputs take several times the message in
memory: what the caches hold then, and not a ping-pong on one hot buffer, is what the
sweep's times see. Kinds are interleaved in rounds (the machine changes speed over time)
and medians over all samples are kept.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import platform as _platform
import sys
from pathlib import Path

import numpy as np

CALIBRATION_CSV = "calibration.csv"
CALIBRATION_JSON = "calibration.json"
FIELDS = ("kind", "size_bytes", "nprocs", "median_s", "q1_s", "q3_s", "samples", "job")
KINDS = ("pingpong", "reduce", "reduce_mpi", "step")
STEP_MAX_BYTES = 4096  # the step's overhead matters (and is measured) at small sizes only
POOL_DEPTH = 8
POOL_CAP_BYTES = 256 << 20  # per kind and rank: fewer buffers for the largest sizes
TARGET_SECONDS = 2e-3  # per kind and round at each size


def _pool(size: int, dtype: np.dtype) -> list[np.ndarray]:
    depth = max(2, min(POOL_DEPTH, POOL_CAP_BYTES // max(size, 1)))
    count = max(1, size // dtype.itemsize)
    # Zeros written explicitly: real pages (not the shared zero page), and sums that never
    # overflow however often a buffer is reduced into.
    return [np.full(count, 0.0, dtype) for _ in range(depth)]


def _iterations(size: int) -> int:
    """Enough iterations for about TARGET_SECONDS at ~10 GB/s, between 3 and 200."""
    return int(np.clip(TARGET_SECONDS / (2e-6 + size / 10e9), 3, 200))


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
    """kind -> (body(i), seconds per sample factor) for this size."""
    from mpi4py import MPI

    from osu_dl_bench.bench.p2p import _latency_round  # OSU's ping-pong round, reused as is

    peer, depth = 1 - comm.Get_rank(), len(send)

    def pingpong(i: int) -> None:
        _latency_round(comm, send[i % depth], recv[i % depth])

    def reduce(i: int) -> None:
        np.add(recv[i % depth], send[i % depth], out=recv[i % depth])

    def reduce_mpi(i: int) -> None:
        MPI.SUM.Reduce_local(send[i % depth], recv[i % depth])

    def step(i: int) -> None:
        buf, tmp = recv[i % depth], send[i % depth]
        half = len(buf) // 2 or 1
        comm.Sendrecv(buf[:half], peer, 11, tmp[:half], peer, 11)
        np.add(buf[:half], tmp[:half], out=buf[:half])

    # A round trip carries 2 messages.
    kinds = {"pingpong": (pingpong, 0.5), "reduce": (reduce, 1.0), "reduce_mpi": (reduce_mpi, 1.0)}
    if size <= STEP_MAX_BYTES:
        kinds["step"] = (step, 1.0)
    return kinds


def measure(comm, sizes: list[int], rounds: int) -> list[dict]:
    """Rows of calibration.csv (rank 0's list; other ranks get the same)."""
    rows = []
    for size in sizes:
        send, recv = _pool(size, np.dtype(np.float32)), _pool(size, np.dtype(np.float32))
        kinds = _kinds(comm, size, send, recv)
        samples: dict[str, list[np.ndarray]] = {k: [] for k in kinds}
        count = _iterations(size)
        for body, _ in kinds.values():
            _timed(comm, body, 2)  # warm-up: first touch of the pool's pages
        for r in range(rounds):
            names = list(kinds)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                body, factor = kinds[name]
                samples[name].append(_timed(comm, body, count) * factor)
        for name, parts in samples.items():
            t = np.concatenate(parts)
            q1, med, q3 = np.percentile(t, [25, 50, 75])
            values = (name, size, comm.Get_size(), med, q1, q3, t.size, 0)
            rows.append(dict(zip(FIELDS, values, strict=True)))
    return rows


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
        "schema_version": 1,
        "nprocs": comm.Get_size(),
        "hosts": sorted(set(comm.allgather(MPI.Get_processor_name()))),
        "cores_per_node": os.cpu_count(),
        "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
        "pool_depth": POOL_DEPTH,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the calibration job (2 ranks)."""
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.runtime import init_mpi, run_guarded
    from osu_dl_bench.units import doubling_sizes, parse_size

    def body() -> int:
        args = _parse(argv)
        lo, _, hi = args.message_size.rpartition(":")
        sizes = doubling_sizes(parse_size(lo or "8"), parse_size(hi))
        comm = init_mpi().COMM_WORLD
        if comm.Get_size() != 2:
            raise UsageError(f"the calibration job needs exactly 2 ranks, got {comm.Get_size()}")
        rows = measure(comm, sizes, max(1, args.rounds))
        meta = _metadata(comm)
        if comm.Get_rank() == 0:
            write_calibration(Path(args.run_dir), rows, meta, args.append)
        return 0

    return run_guarded(body)


if __name__ == "__main__":
    raise SystemExit(main())
