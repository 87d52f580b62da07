"""Stall reports end to end: one rank of a sweep stopped with SIGSTOP mid-sweep, N times.

    python scripts/stall_check.py [--trials 10] [--np 3] [--stall-timeout 10]
                                  [--out results/stall_reports_p3.txt]

Each trial runs ``osu-dl-bench sweep`` (allreduce, native and ring, 8 B to 64 KiB) into a
new run directory, waits until it has stored a few points, stops one rank with SIGSTOP
(trial k stops rank k mod NP, rank 0 included; its pid comes from its heartbeat file) and
times how long the orchestrator takes to print a stall report naming that rank as not
responding. Once the sweep has ended, the stopped process is continued (SIGCONT) if it
outlived its job, and ``sweep --resume`` restarts the job and must complete the sweep.
One table row per trial, then a summary; the same lines go to --out, under the command
and the machine's load. Exit 1 if any trial misses: not named, named later than the
stall timeout plus 10 s, or the resumed sweep incomplete.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from osu_dl_bench.jobs import launch
from osu_dl_bench.measurement import heartbeat
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.runtime.launcher import OVERSUBSCRIBED_CVARS

REPO = Path(__file__).resolve().parents[1]
SWEEP = [sys.executable, "-m", "osu_dl_bench", "sweep"]
# What each trial sweeps: 14 sizes x 2 candidates, a few seconds a job.
SWEEP_ARGS = ["--collectives", "allreduce", "-a", "native,ring", "-m", "8:64K", "--budget", "0.3"]
ROWS_BEFORE_STOP = 6  # the rank is stopped once this many rows are stored
REPORT_MARGIN = 10.0  # the report must come within the stall timeout plus this


@dataclass(frozen=True)
class Trial:
    """What one trial saw."""

    rank: int
    named: bool
    seconds: float | None  # from SIGSTOP to the report naming the rank
    outlived: bool  # the stopped process outlived its job (and was continued)
    resume_code: int | None
    complete: bool
    rows: int


def load() -> str:
    """The 1-, 5- and 15-minute load averages."""
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def environment() -> dict[str, str]:
    """The jobs' environment: MPICH's no-busy-poll settings (more ranks than cores)."""
    return launch.mpi_environment(extra=OVERSUBSCRIBED_CVARS)


def stderr_lines(proc: subprocess.Popen, lines: list[tuple[float, str]]) -> threading.Thread:
    """Keep each line of the process's stderr with the time it arrived."""

    def read() -> None:
        for line in proc.stderr:
            lines.append((time.monotonic(), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def rank_pid(run_dir: Path, rank: int, proc: subprocess.Popen) -> int | None:
    """The rank's pid, from its heartbeat, once ROWS_BEFORE_STOP rows are stored."""
    results, deadline = run_dir / "results.csv", time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):
            if len(results.read_text().splitlines()) > ROWS_BEFORE_STOP:
                folder = next((run_dir / "heartbeats").iterdir())
                beat = heartbeat.read(folder / heartbeat.file_name(rank), rank)
                if beat.problem is None:
                    return beat.pid
        time.sleep(0.05)
    return None


def alive(pid: int) -> bool:
    """Whether pid names a process that has not ended (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def trial(number: int, args: argparse.Namespace, base: Path) -> Trial:
    """Stop one rank of a sweep, time its report, then resume the sweep."""
    rank = number % args.np
    run_dir = base / f"trial{number}"
    argv = [*SWEEP_ARGS, "--np", str(args.np), "--stall-timeout", f"{args.stall_timeout:g}"]
    argv += ["--launches", "1", "-o", str(run_dir)]
    quiet, kept = subprocess.DEVNULL, subprocess.PIPE  # the report goes to stderr
    proc = launch.start([*SWEEP, *argv], environment(), REPO, stdout=quiet, stderr=kept)
    lines: list[tuple[float, str]] = []
    reader = stderr_lines(proc, lines)
    pid = rank_pid(run_dir, rank, proc)
    if pid is None:
        launch.stop(proc)
        return Trial(rank, False, None, False, None, False, 0)
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        proc.wait(args.stall_timeout + 120)
    except subprocess.TimeoutExpired:
        launch.stop(proc)
    reader.join(10)
    # '  not responding (...): rank 2 (11 s)' or '...: ranks 0 (11 s), 2 (11 s)'
    named = [
        at
        for at, line in lines
        if line.startswith("  not responding") and re.search(rf"(rank|,) {rank} \(", line)
    ]
    outlived = alive(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    resumed = launch.run([*SWEEP, *argv, "--resume"], 600, env=environment(), cwd=REPO)
    meta = RunStore(run_dir).read_metadata()
    stalled = [rank] == [r for s in meta.get("stalls", []) for r in s["not_responding"]]
    return Trial(
        rank=rank,
        named=bool(named) and stalled,
        seconds=named[0] - stopped if named else None,
        outlived=outlived,
        resume_code=resumed.returncode,
        complete=resumed.returncode == 0 and meta.get("complete") is True,
        rows=len(RunStore(run_dir).load()),
    )


def row(number: int, got: Trial, limit: float) -> str:
    seconds = "-" if got.seconds is None else f"{got.seconds:.1f}"
    in_time = got.seconds is not None and got.seconds <= limit
    return (
        f"| {number} | {got.rank} | {'yes' if got.named else 'NO'} | {seconds} | "
        f"{'yes' if in_time else 'NO'} | {'yes' if got.outlived else 'no'} | "
        f"{got.resume_code} | {'yes' if got.complete else 'NO'} | {got.rows} |"
    )


def main() -> int:
    """Run the trials, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--np", type=int, default=3)
    parser.add_argument("--stall-timeout", type=float, default=10.0)
    parser.add_argument("--out", default=str(REPO / "results" / "stall_reports_p3.txt"))
    args = parser.parse_args()
    limit = args.stall_timeout + REPORT_MARGIN
    command = shlex.join(["python", "scripts/stall_check.py", *sys.argv[1:]])
    lines = [
        f"# command: {command}",
        f"# load before: {load()} on {os.cpu_count()} cores",
        f"# each trial: osu-dl-bench sweep --np {args.np} {shlex.join(SWEEP_ARGS)} "
        f"--launches 1 --stall-timeout {args.stall_timeout:g}; SIGSTOP to one rank once "
        f"{ROWS_BEFORE_STOP} rows are stored; then sweep --resume",
        "| trial | rank stopped | named | s from SIGSTOP to report | within "
        f"{limit:g} s | process outlived its job | resume exit | complete | rows |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    trials = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="stall-check-") as tmp:
        for number in range(args.trials):
            trials.append(trial(number, args, Path(tmp)))
            lines.append(row(number, trials[-1], limit))
            print(lines[-1], flush=True)
    seconds = [t.seconds for t in trials if t.seconds is not None]
    good = [t for t in trials if t.named and t.seconds <= limit and t.complete]
    spread = (
        f"median {statistics.median(seconds):.1f} s, max {max(seconds):.1f} s"
        if seconds
        else "none"
    )
    lines += [
        f"# named within {limit:g} s and completed by --resume in {len(good)} of "
        f"{len(trials)} trials; seconds from SIGSTOP to the report: {spread}",
        f"# {time.monotonic() - start:.0f} s wall; load after: {load()}",
    ]
    print("\n".join(lines[-2:]), flush=True)
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    print(f"# wrote {args.out}")
    return 0 if len(good) == len(trials) else 1


if __name__ == "__main__":
    sys.exit(main())
