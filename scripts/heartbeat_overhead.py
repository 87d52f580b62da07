"""What the heartbeat adds to the kernel's hot loop, in nanoseconds per call.

    mpiexec -n 2 python scripts/heartbeat_overhead.py [--calls 20000] [--reps 31]

Times ``kernel.timed_round`` with a mapped heartbeat file (measurement.heartbeat) against
the same loop without the heartbeat's lines (``reference_round``: the loop as it is
without them), in repetitions whose two runs go back to back, because this machine's
speed swings. Two cases: a call and a barrier that do nothing (the loop's own cost, where
the added stores show alone), and an 8-byte MPI_Allreduce after MPI_Barrier on
COMM_WORLD (what a sweep's smallest point pays per call). Prints the median nanoseconds
per call of each, and the median and quartiles of the difference within a repetition.
The heartbeat's stores are outside the timer: they lengthen a round, not a timing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from osu_dl_bench.jobs.entry import run_in_job


def reference_round(barrier, calls, order, bufs, op, roots, times) -> None:
    """kernel.timed_round (blocked, no arrivals kept, no delay) without the heartbeat's
    lines: the baseline."""
    from mpi4py import MPI

    from collectives.device import settle_for

    wtime = MPI.Wtime
    send, recv = bufs.send, bufs.recv
    settle = settle_for(send, recv)
    scratch = np.zeros(times.shape)
    delay = 0.0

    def timed(call, row, i, root, stamps) -> None:
        barrier()
        if delay:
            time.sleep(delay)
        start = wtime()
        call(send, recv, op, root)
        settle()
        row[i] = wtime() - start
        stamps[i] = start

    for call, row, stamps in [(calls[j], times[j], scratch[j]) for j in order]:
        for i, root in enumerate(roots):
            timed(call, row, i, root, stamps)


def per_call_ns(run, comm, calls: int) -> float:
    """Wall nanoseconds per call of one pass, the slowest rank's."""
    from mpi4py import MPI

    comm.Barrier()
    start = time.perf_counter_ns()
    run()
    elapsed = np.array([(time.perf_counter_ns() - start) / calls])
    comm.Allreduce(MPI.IN_PLACE, elapsed, MPI.MAX)
    return float(elapsed[0])


def measure(comm, args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from collectives import Buffers
    from osu_dl_bench.measurement import heartbeat, kernel

    folder = Path(tempfile.mkdtemp(prefix="heartbeat-overhead-"))
    heartbeat.create_files(folder, comm.Get_size())
    beat = heartbeat.Heartbeat(folder / heartbeat.file_name(comm.Get_rank()), comm.Get_rank())
    beat.keep_ticking()
    small_in, small_out = np.ones(2, np.float32), np.empty(2, np.float32)
    cases = {
        "no-op call, no-op barrier": (lambda: None, lambda s, r, o, root: None),
        "8 B MPI_Allreduce after MPI_Barrier": (
            comm.Barrier,
            lambda s, r, o, root: comm.Allreduce(s, r, MPI.SUM),
        ),
    }
    bufs, roots = Buffers(small_in, small_out), [0] * args.calls
    times = np.zeros((1, args.calls))
    lines = [
        f"# {MPI.Get_library_version().splitlines()[0].strip()}, p={comm.Get_size()}, "
        f"{args.calls} calls x {args.reps} interleaved repetitions, medians (ns per call)",
        f"{'case':<38}{'without':>10}{'with':>10}{'added':>8}   added q1..q3",
    ]
    for name, (barrier, call) in cases.items():
        runs = {
            "without": (
                heartbeat.NoHeartbeat(),
                lambda b=barrier, c=call: reference_round(b, [c], [0], bufs, None, roots, times),
            ),
            "with": (
                beat,
                lambda b=barrier, c=call: kernel.timed_round(b, [c], [0], bufs, None, roots, times),
            ),
        }
        seen: dict[str, list[float]] = {"without": [], "with": []}
        for rep in range(args.reps):
            # alternate which goes first, so neither always follows the other
            for key in ("without", "with") if rep % 2 == 0 else ("with", "without"):
                heartbeat._current, run = runs[key]
                seen[key].append(per_call_ns(run, comm, args.calls))
        without, with_beat = seen["without"], seen["with"]
        a, b = statistics.median(without), statistics.median(with_beat)
        # each repetition's pair ran back to back: their difference sees one machine state
        added = sorted(w - o for w, o in zip(with_beat, without, strict=True))
        q1, mid, q3 = (added[len(added) * k // 4] for k in (1, 2, 3))
        lines.append(f"{name:<38}{a:>10.0f}{b:>10.0f}{mid:>8.0f}   {q1:.0f}..{q3:.0f}")
    if comm.Get_rank() == 0:
        print("\n".join(lines), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=31)
    args = parser.parse_args()
    return run_in_job(lambda comm: measure(comm, args))


if __name__ == "__main__":
    raise SystemExit(main())
