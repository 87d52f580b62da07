"""Best of our algorithms against the MPI library's own, and against the memory-copy bound.

    python scripts/bench_collectives.py [--np 2] [--rounds 6] [--budget 3]
                                         [--out results/collectives-p2] [--timeout 900]

"Native" is the fastest of native at thread level single and at
multiple (MPICH's large-message allreduce differs between the two) and on registered
buffers, so each round launches three jobs: thread level single on private buffers
(``-d cpu``), multiple on private buffers, and single on registered buffers
(``-d cpu-registered``: memory the node's ranks can map, where the cma algorithms read
their peers with plain loads). Ours is reported twice, per buffer kind. Each job
measures every eligible algorithm the way the sweep does (measurement.kernel.measure_budget):
validated once, then interleaved rounds in rotated order, each round running every
candidate several times (warm, as OSU's loop), for ``--budget`` seconds per size. Per
job and size the statistic is the median over rounds of the round's mean per-iteration
maximum across ranks. The memory-copy bound is one numpy copy of the message on every
rank at once, timed the same way (warm). Reported: medians over jobs, ratios
best-of-ours / native and best-of-ours / memcpy, with their min..max over jobs' rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SIZES = (1 << 20, 4 << 20, 16 << 20)
COLLECTIVES = ("allreduce", "bcast")
# Iterations of the memory-copy bound (warm, like the candidates' rounds).
ITERATIONS = {1 << 20: 40, 4 << 20: 15, 16 << 20: 6}


# (thread level, buffer kind) of each round's jobs, in launch order.
JOBS = (("single", "cpu"), ("multiple", "cpu"), ("single", "cpu-registered"))


def worker(comm, thread_level: str, device: str, round_index: int, out: str, budget: float) -> int:
    """Inside mpiexec: measure every eligible variant and the memcpy bound; rank 0 appends."""
    import numpy as np
    from mpi4py import MPI as mpi

    from collectives import SPECS, CallContext, algorithms
    from collectives.buffers import array_module
    from collectives.dtypes import element_type
    from collectives.ops import reduce_op
    from osu_dl_bench.measurement.kernel import measure_budget, plan_variants, prepare_inputs
    from osu_dl_bench.runtime.topology import discover_topology

    topo = discover_topology(comm)
    etype, op = element_type("float32"), reduce_op("sum")
    xp = array_module(device)
    rows = []
    for collective in COLLECTIVES:
        spec = SPECS[collective]
        ctx = CallContext(comm.size, etype, op, device, topo.nodes, topo.ppn)
        every = [v for a in algorithms(collective) for v in a.grid_variants()]
        variants = plan_variants(every, ctx).eligible
        calls = [v.bind(comm) for v in variants]
        point_op = op if spec.reduces else None
        for size in SIZES:
            inputs = prepare_inputs(comm, spec, etype, point_op, xp, size // etype.dtype.itemsize)
            timing = measure_budget(comm, calls, inputs, budget)
            # A round's time: the mean over its iterations; the job's: the median round.
            medians = np.median(timing.times.mean(axis=2), axis=0) * 1e6
            rows += [
                {
                    "collective": collective,
                    "algorithm": variant.label,
                    "backend": variant.algorithm.backend,
                    "size": size,
                    "us": float(us),
                    "validation": "fail" if wrong else "pass",
                    "thread_level": thread_level,
                    "buffers": device,
                    "round": round_index,
                }
                for variant, us, wrong in zip(variants, medians, timing.wrong, strict=True)
            ]
    for size in SIZES if device == "cpu" else ():
        rows.append(
            {
                "collective": "memcpy",
                "algorithm": "memcpy",
                "backend": "numpy",
                "size": size,
                "us": _memcpy_us(comm, mpi, np, size),
                "validation": None,
                "thread_level": thread_level,
                "buffers": device,
                "round": round_index,
            }
        )
    if comm.rank == 0:
        with open(out, "a") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
    return 0


def _memcpy_us(comm, mpi, np, size: int) -> float:
    """Median over iterations of the slowest rank's numpy copy of ``size`` bytes."""
    src = np.ones(size // 4, np.float32)
    dst = np.empty_like(src)
    times = np.empty(ITERATIONS[size] * 2)
    for i in range(len(times)):
        comm.Barrier()
        start = mpi.Wtime()
        np.copyto(dst, src)
        times[i] = mpi.Wtime() - start
    worst = np.empty_like(times)
    comm.Allreduce(times, worst, mpi.MAX)
    return float(np.median(worst) * 1e6)


def orchestrate(args: argparse.Namespace) -> None:
    """Launch each round's jobs (JOBS), then aggregate and print the comparison."""
    from osu_dl_bench.jobs import launch

    raw = Path(tempfile.mkstemp(suffix=".jsonl")[1])
    for round_index in range(args.rounds):
        for level, device in JOBS:
            print(
                f"round {round_index + 1}/{args.rounds}: thread level {level}, buffers {device}",
                file=sys.stderr,
                flush=True,
            )
            argv = [__file__, "--worker", level, "--device", device, "--round", str(round_index)]
            argv += ["--raw", str(raw), "--budget", str(args.budget)]
            cmd = launch.mpi_command(args.np, argv)
            job = launch.run(
                cmd, args.timeout, env=launch.mpi_environment(args.np), stdout=None, stderr=None
            )
            if job.returncode != 0:
                raise subprocess.CalledProcessError(job.returncode, cmd)
    rows = [json.loads(line) for line in raw.read_text().splitlines()]
    report = _aggregate(rows, args.rounds)
    print(report)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}.jsonl").write_text(raw.read_text())
        Path(f"{args.out}.txt").write_text(report + "\n")


def _per_round(rows: list[dict], collective: str, size: int, pick) -> dict[int, float]:
    """Round -> the fastest of that round's jobs for matching rows."""
    best: dict[int, float] = {}
    for row in rows:
        if row["collective"] == collective and row["size"] == size and pick(row):
            best[row["round"]] = min(best.get(row["round"], float("inf")), row["us"])
    return best


def _aggregate(rows: list[dict], rounds: int) -> str:
    """The comparison table: per collective and size, medians over rounds and ratios."""
    lines = [
        f"# per job: median over interleaved rounds (as the sweep) of the per-iteration max "
        f"across ranks; native: per round the fastest of its jobs (single, multiple, "
        f"registered buffers); ours: per buffer kind; medians [min..max] over {rounds} rounds",
        f"{'collective':<10}{'size':>6} {'buffers':<15}{'best of ours':<26}{'ours(us)':>10}"
        f"{'native(us)':>11}{'memcpy(us)':>11}{'ours/native':>20}{'ours/memcpy':>20}",
    ]
    for collective in COLLECTIVES:
        for size in SIZES:
            native = _per_round(rows, collective, size, lambda r: r["algorithm"] == "native")
            memcpy = _per_round(rows, "memcpy", size, lambda r: True)
            levels = {
                f"{r['thread_level']}/{r['buffers']}"
                for r in rows
                if r["collective"] == collective
                and r["size"] == size
                and r["algorithm"] == "native"
                and r["us"] in native.values()
            }
            for device in sorted({r.get("buffers", "cpu") for r in rows if "buffers" in r}):
                best, ours = _best_of_ours(rows, collective, size, device)
                lines.append(
                    f"{collective:<10}{size >> 20:>5}M {device:<15}{best:<26}"
                    f"{statistics.median(ours.values()):>10.0f}"
                    f"{statistics.median(native.values()):>11.0f}"
                    f"{statistics.median(memcpy.values()):>11.0f}"
                    f"{_ratios(ours, native):>20}{_ratios(ours, memcpy):>20}"
                    f"  native fastest at: {', '.join(sorted(levels))}"
                )
    fails = sum(r["validation"] == "fail" for r in rows)
    lines.append(f"# validation: {fails} failures in {len(rows)} measurements")
    return "\n".join(lines)


def _best_of_ours(rows: list[dict], collective: str, size: int, device: str) -> tuple:
    """(label, round -> us) of our variant with the lowest median on ``device`` buffers."""
    candidates = {
        r["algorithm"]
        for r in rows
        if r["collective"] == collective
        and r["backend"] == "mpi"
        and r["algorithm"] != "native"
        and r.get("buffers") == device
    }
    times = {
        a: _per_round(
            rows, collective, size, lambda r, a=a: r["algorithm"] == a and r["buffers"] == device
        )
        for a in candidates
    }
    best = min(times, key=lambda a: statistics.median(times[a].values()))
    return best, times[best]


def _ratios(numerator: dict[int, float], denominator: dict[int, float]) -> str:
    pairs = [numerator[k] / denominator[k] for k in numerator if k in denominator]
    return f"{statistics.median(pairs):.2f} [{min(pairs):.2f}..{max(pairs):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per size and job")
    parser.add_argument("--out", default=None, help="write OUT.txt and OUT.jsonl")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per job (900)")
    parser.add_argument("--worker", choices=("single", "multiple"), help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--raw", help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        from osu_dl_bench.jobs.entry import run_in_job

        def body(comm) -> int:
            return worker(comm, args.worker, args.device, args.round, args.raw, args.budget)

        raise SystemExit(run_in_job(body, args.worker))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    orchestrate(args)


if __name__ == "__main__":
    main()
