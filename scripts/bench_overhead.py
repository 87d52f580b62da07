"""Harness overhead: our native allreduce against a plain mpi4py loop on the same MPI.

    mpiexec -n 2 python scripts/bench_overhead.py [--rounds 15]

Both time the call the same way (untimed barrier, timer around the call, mean per rank,
averaged across ranks), interleaved round by round because this machine's speed swings.
Prints medians over rounds, the extra microseconds and the ratio. Targets:
<= 1.0 us extra at 8 B and <= 5% extra at 64 KiB and above.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from osu_dl_bench.jobs.entry import run_in_job

SIZES = (8, 65536, 1 << 20, 16 << 20)


def plain_loop_us(comm, size: int, iterations: int) -> float:
    """OSU's loop written directly against mpi4py; mean over ranks of per-rank means."""
    from mpi4py import MPI

    send = np.ones(size // 4, np.float32)
    recv = np.empty_like(send)
    total = 0.0
    for _ in range(iterations // 10):  # warm-up
        comm.Barrier()
        comm.Allreduce(send, recv, MPI.SUM)
    for _ in range(iterations):
        comm.Barrier()
        start = MPI.Wtime()
        comm.Allreduce(send, recv, MPI.SUM)
        total += MPI.Wtime() - start
    return comm.allreduce(total / iterations) / comm.Get_size() * 1e6


def harness_us(comm, setting, topo, size: int, iterations: int) -> float:
    """The same measurement through the bench harness."""
    from collectives import lookup
    from osu_dl_bench.measurement.bench_config import BenchConfig
    from osu_dl_bench.measurement.harness import measure_collective

    cfg = BenchConfig("allreduce", size, size, iterations, iterations // 10)
    variant = lookup("allreduce", "native").variant()
    [records] = list(measure_collective(comm, cfg, setting, topo, [variant]))
    return records[0].avg_us


def overhead(comm, rounds: int) -> int:
    """Print the comparison, size by size (rank 0)."""
    # Imported once MPI runs: the harness imports mpi4py.MPI, which would start MPI.
    from mpi4py import MPI

    from collectives import SPECS
    from collectives.dtypes import element_type
    from collectives.ops import reduce_op
    from osu_dl_bench.measurement.harness import Setting
    from osu_dl_bench.runtime.topology import discover_topology

    setting = Setting(SPECS["allreduce"], element_type("float32"), reduce_op("sum"), np)
    topo = discover_topology(comm)
    if comm.rank == 0:
        print(
            f"# {MPI.Get_library_version().splitlines()[0].strip()}, p={comm.size}, "
            f"{rounds} interleaved rounds, medians"
        )
        print(
            f"{'size':>10}{'plain(us)':>12}{'ours(us)':>12}{'extra(us)':>11}{'ratio':>8}"
            f"{'ratio min..max':>18}"
        )
    for size in SIZES:
        iterations = 2000 if size <= 8192 else (200 if size <= 1 << 20 else 20)
        plain, ours = [], []
        for _ in range(rounds):
            plain.append(plain_loop_us(comm, size, iterations))
            ours.append(harness_us(comm, setting, topo, size, iterations))
        ratios = [o / p for o, p in zip(ours, plain, strict=True)]
        if comm.rank == 0:
            p_med, o_med = statistics.median(plain), statistics.median(ours)
            print(
                f"{size:>10}{p_med:>12.2f}{o_med:>12.2f}{o_med - p_med:>11.2f}"
                f"{statistics.median(ratios):>8.3f}{min(ratios):>9.3f}..{max(ratios):.3f}"
            )
    return 0


def main() -> int:
    """Parse --rounds, then run the comparison inside this MPI job at thread level single."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    return run_in_job(lambda comm: overhead(comm, args.rounds), "single")


if __name__ == "__main__":
    raise SystemExit(main())
