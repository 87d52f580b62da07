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
maximum across ranks. The memory-copy bound is ``bench --bounds``' copy
(measurement.bounds: one copy of the message into another buffer, on every rank at once),
timed by the kernel's OSU loop after a warm-up: the median over iterations of the slowest
rank's copy. Reported: medians over jobs, ratios
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
# Timed iterations of the memory-copy bound, after COPY_WARMUP untimed ones.
ITERATIONS = {1 << 20: 80, 4 << 20: 30, 16 << 20: 12}
COPY_WARMUP = 2


# (thread level, buffer kind) of each round's jobs, in launch order.
JOBS = (("single", "cpu"), ("multiple", "cpu"), ("single", "cpu-registered"))


def worker(comm, thread_level: str, device: str, round_index: int, out: str, budget: float) -> int:
    """Inside mpiexec: measure every eligible variant and the memcpy bound; rank 0 writes
    the launch's record (its rows, and its collective points for the run directory)."""
    from dataclasses import asdict

    import numpy as np

    from collectives import SPECS, CallContext, algorithms
    from collectives.buffers import array_module
    from collectives.dtypes import element_type
    from collectives.ops import reduce_op
    from osu_dl_bench.jobs.plan import CollectivePlan, LaunchSlot, SweepSetting
    from osu_dl_bench.jobs.worker import sweep_points
    from osu_dl_bench.measurement.kernel import measure_budget, plan_variants, prepare_inputs
    from osu_dl_bench.paths import write_text_atomic
    from osu_dl_bench.runtime.metadata import collect_metadata
    from osu_dl_bench.runtime.topology import discover_topology

    topo = discover_topology(comm)
    etype, op = element_type("float32"), reduce_op("sum")
    xp = array_module(device)
    setting = SweepSetting(etype, op, xp, {})
    slot = LaunchSlot(round_index + 1, group_name(thread_level, device))
    rows, points, copy_us = [], [], {}
    for collective in COLLECTIVES:
        spec = SPECS[collective]
        ctx = CallContext(comm.size, etype, op, device, topo.nodes, topo.ppn)
        every = [v for a in algorithms(collective) for v in a.grid_variants()]
        variants = plan_variants(every, ctx).eligible
        calls = [v.bind(comm) for v in variants]
        point_op = op if spec.reduces else None
        plan = CollectivePlan(spec, [], variants, [], topo.shape)
        for size in SIZES:
            count = size // etype.dtype.itemsize
            inputs = prepare_inputs(comm, spec, etype, point_op, xp, count)
            timing = measure_budget(comm, calls, inputs, budget)
            points += sweep_points(device, setting, plan, count, variants, timing, slot)
            if collective == COLLECTIVES[0] and device == "cpu":  # the bound, once per size
                copy_us[size] = _copy_bound_us(comm, inputs, device, xp, count, etype.dtype)
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
    for size, us in copy_us.items():
        rows.append(
            {
                "collective": "memcpy",
                "algorithm": "memcpy",
                "backend": "numpy",
                "size": size,
                "us": us,
                "validation": None,
                "thread_level": thread_level,
                "buffers": device,
                "round": round_index,
            }
        )
    if comm.rank == 0:
        meta = collect_metadata(topo).as_dict()
        record = {"rows": rows, "points": [asdict(point) for point in points]}
        record |= {"nprocs": comm.size, "nodes": topo.nodes, "ppn": topo.ppn}
        record |= {"hosts": list(topo.hostnames)}
        record |= {k: meta[k] for k in ("mpi_library", "mpi_version", "mpi4py_version")}
        write_text_atomic(out, json.dumps(record))
    return 0


def group_name(thread_level: str, device: str) -> str:
    """The isolation group of a job's launches: the first job's is the MPI library's
    default group ('mpi', the reference tune pairs the others with), then
    'multiple-cpu', 'single-cpu-registered'."""
    return "mpi" if (thread_level, device) == JOBS[0] else f"{thread_level}-{device}"


def _copy_bound_us(comm, inputs, device: str, xp, count: int, dtype) -> float:
    """The memory-copy bound at one size: bench --bounds' copy of ``count`` elements
    (measurement.bounds), timed by the kernel's OSU loop as bench times it; the median over
    iterations of the slowest rank's copy, in microseconds."""
    from osu_dl_bench.measurement.bounds import bound_calls
    from osu_dl_bench.measurement.kernel import measure_osu

    # The first bound is the copy (the host's, or on a GPU the device's memcpy).
    copy = bound_calls(device, xp, count, dtype, inputs.spec, comm.Get_rank())[0]
    roots = [inputs.shape.root]
    timed = roots * ITERATIONS[count * dtype.itemsize]
    return measure_osu(comm, [copy], inputs, roots * COPY_WARMUP, timed).stats[0].p50_us


def orchestrate(args: argparse.Namespace) -> int:
    """Launch each round's jobs (JOBS) through the experiment engine into the run
    directory, then aggregate and print the comparison; the exit code."""
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.jobs import launch
    from osu_dl_bench.jobs.experiment import RecordedExperiment, Turn, run_recorded
    from osu_dl_bench.jobs.orchestrate import JobFailed, JobOutcome
    from osu_dl_bench.paths import write_text_atomic

    levels = {group_name(level, device): (level, device) for level, device in JOBS}
    config = {"np": args.np, "rounds": args.rounds, "budget": args.budget}

    def run(turn: Turn) -> JobOutcome:
        level, device = levels[turn.job[2]]
        round_index = turn.job[1] - 1
        print(
            f"round {round_index + 1}/{args.rounds}: thread level {level}, buffers {device}",
            file=sys.stderr,
            flush=True,
        )
        argv = [__file__, "--worker", level, "--device", device, "--round", str(round_index)]
        argv += ["--raw", str(turn.part), "--budget", str(args.budget)]
        cmd = launch.mpi_command(args.np, argv)
        env = launch.mpi_environment(args.np)
        try:
            code = launch.run(cmd, args.timeout, env=env, stdout=None, stderr=None).returncode
            ended = f"ended with exit code {code}"
        except subprocess.TimeoutExpired:
            code, ended = 1, f"did not finish within {args.timeout:g} s (--timeout)"
        if code != 0:
            print(
                f"bench_collectives: error: the job of round {round_index + 1} ({level}, "
                f"{device}) {ended}"
                + (
                    f"; the rounds before it are kept in {run_dir}: rerun with --resume"
                    if args.run_dir or args.out
                    else " (no run directory kept: give --run-dir to keep one)"
                ),
                file=sys.stderr,
                flush=True,
            )
        return JobOutcome(code, finished=False, failures=0)

    # OUT names files beside the run directory: 'OUT/' must not put them inside it.
    out = str(Path(args.out)) if args.out else None
    with tempfile.TemporaryDirectory(prefix="bench-collectives-") as scratch:
        run_dir = args.run_dir or out or str(Path(scratch) / "run")
        spec = RecordedExperiment(
            "bench_collectives", config, run_dir, "--run-dir" if args.run_dir else "--out",
            (args.np,), args.rounds, tuple(levels), resume=args.resume, shuffle=False,
        )  # fmt: skip
        try:
            found = run_recorded(spec, run)
        except JobFailed as exc:
            return exc.code or 1
        except UsageError as exc:
            print(f"bench_collectives: error: {exc}", file=sys.stderr)
            return 2
    if found.code != 0:
        return found.code
    rows = [row for record in found.records for row in record["rows"]]
    report = _aggregate(rows, args.rounds)
    print(report)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(f"{out}.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
        write_text_atomic(f"{out}.txt", report + "\n")
    return 0


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
    """Parse the options; run one job's worker or orchestrate the comparison."""
    from osu_dl_bench.commands.arguments import (
        output_stem,
        positive_seconds,
        seconds_up_to,
        whole_number_up_to,
    )
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.jobs.launch import check_not_in_mpi_job
    from osu_dl_bench.jobs.sweep_config import MAX_BUDGET, MAX_LAUNCHES, MAX_PROCESSES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=whole_number_up_to(MAX_PROCESSES), default=2)
    parser.add_argument("--rounds", type=whole_number_up_to(MAX_LAUNCHES), default=6)
    parser.add_argument(
        "--budget", type=seconds_up_to(MAX_BUDGET), default=3.0, help="seconds per size and job"
    )
    parser.add_argument(
        "--out",
        type=output_stem,
        default=None,
        help="write OUT.txt and OUT.jsonl, and the run directory OUT",
    )
    parser.add_argument(
        "--run-dir", default=None, help="the run directory (default OUT; without --out, none kept)"
    )
    parser.add_argument("--resume", action="store_true", help="continue the run directory")
    parser.add_argument(
        "--timeout", type=positive_seconds, default=900, help="seconds per job (900)"
    )
    parser.add_argument("--worker", choices=("single", "multiple"), help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--raw", help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.resume and not (args.run_dir or args.out):
        parser.error("--resume continues a kept run directory: give --run-dir or --out")
    if args.worker:
        from osu_dl_bench.jobs.entry import run_in_job

        def body(comm) -> int:
            return worker(comm, args.worker, args.device, args.round, args.raw, args.budget)

        raise SystemExit(run_in_job(body, args.worker))
    try:
        check_not_in_mpi_job("bench_collectives.py")
    except UsageError as exc:
        parser.error(str(exc))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(orchestrate(args))


if __name__ == "__main__":
    main()
