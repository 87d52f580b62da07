"""The job launcher on a real mpiexec job: a job that prints, then hangs, is stopped by the
stall timeout, and nothing of its process group outlives it; the in-job entry starts MPI at
its level and turns errors into one message and one exit code on every rank."""

from __future__ import annotations

import re
import time
from pathlib import Path

from mpirun import mpi_env, run_mpi

from osu_dl_bench.jobs import launch
from osu_dl_bench.jobs.sweep_config import MIN_STALL_TIMEOUT

# The product's shortest stall timeout: the job is never silent before it hangs, so the
# test waits for the stall itself, not for a start-up that may take long on busy cores.
STALL = MIN_STALL_TIMEOUT
# Each rank starts a child (a helper process that the MPI launcher does not know of) that
# says "starting" twice a second until the rank has started MPI, then sleeps; the rank prints
# its pid and the child's, starts MPI, says so and hangs: rank 0 in a receive that never
# matches, rank 1 asleep. Each line is one f-string (one write): the ranks' output arrives
# interleaved. SIGTERM is ignored, so only the SIGKILL after the grace ends the ranks.
TICKER = (
    "import select, sys, time\n"
    "while not select.select([sys.stdin], [], [], 0.5)[0]:\n"
    "    print('starting', flush=True)\n"
    "time.sleep(600)\n"
)
HANGING_JOB = (
    "import os, signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    f"child = subprocess.Popen([sys.executable, '-c', {TICKER!r}], stdin=subprocess.PIPE)\n"
    "print(f'pid {os.getpid()}', flush=True)\n"
    "print(f'pid {child.pid}', flush=True)\n"
    "from mpi4py import MPI\n"
    "comm = MPI.COMM_WORLD\n"
    "child.stdin.write(b'ready')\n"
    "child.stdin.flush()\n"
    "print(f'ready {comm.rank}', flush=True)\n"
    "comm.recv(source=1) if comm.rank == 0 else time.sleep(600)\n"
)


def _group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes in process group ``pgid`` (Linux /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def _wait_until_gone(pids: list[int], pgid: int, seconds: float = 10) -> list[int]:
    """What is still alive of ``pids`` and the group after at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        left = sorted(_live(pids) | set(_group_members(pgid)))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _live(pids: list[int]) -> set[int]:
    """Those of ``pids`` that are live (not zombie) processes."""
    live = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            live.add(pid)
    return live


def test_a_job_that_prints_then_hangs_is_stopped_by_the_stall_timeout_group_and_all():
    proc = launch.start(launch.mpi_command(2, ["-c", HANGING_JOB]), env=mpi_env())
    lines: list[str] = []
    start = time.monotonic()
    ended = launch.follow(proc, STALL, lines.append)
    took = time.monotonic() - start
    assert ended.stalled and ended.code != 0, (ended, lines)
    # mpiexec forwards the ranks' output as it comes: one rank's line may land in another's
    text = "".join(lines)
    assert sorted(re.findall(r"ready (\d+)", text)) == ["0", "1"], lines
    assert STALL <= took < STALL + launch.STOP_GRACE + 60, took
    pids = [int(pid) for pid in re.findall(r"pid (\d+)", text)]
    assert len(pids) == 4, lines  # two ranks and their children
    assert not _wait_until_gone(pids, proc.pid), "part of the job outlived its stop"


# One program, three bodies run through the in-job entry: by the first argument.
ENTRY_PROGRAM = """
import sys
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.entry import run_in_job
from osu_dl_bench.runtime.start import thread_level_name


def level(comm):
    from mpi4py import MPI
    print(f"rank {comm.rank} of {comm.size}: {thread_level_name(MPI.Query_thread())}", flush=True)
    return 0


def refuse(comm):
    raise UsageError("no such thing")


def crash(comm):
    if comm.rank == 1:
        raise RuntimeError("a bug on rank 1")
    comm.barrier()  # rank 0 would wait here forever
    return 0


body = {"level": level, "refuse": refuse, "crash": crash}[sys.argv[1]]
sys.exit(run_in_job(body, sys.argv[2] if len(sys.argv) > 2 else "single"))
"""


def test_the_in_job_entry_starts_mpi_at_the_level_asked_for():
    done = run_mpi(2, ["-c", ENTRY_PROGRAM, "level", "serialized"], timeout=120)
    assert done.returncode == 0, done.stderr
    # mpiexec may splice one rank's line into the other's: find the lines, not split them
    levels = "single|funneled|serialized|multiple"
    found = sorted(re.findall(rf"rank (\d) of (\d): ({levels})", done.stdout))
    assert found == [("0", "2", "serialized"), ("1", "2", "serialized")], done.stdout


def test_the_in_job_entry_turns_a_usage_error_into_one_message_and_exit_2():
    done = run_mpi(2, ["-c", ENTRY_PROGRAM, "refuse"], timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("osu-dl-bench: error: no such thing") == 1, done.stderr


def test_the_in_job_entry_aborts_the_job_on_one_ranks_bug():
    done = run_mpi(2, ["-c", ENTRY_PROGRAM, "crash"], timeout=120)
    assert done.returncode != 0
    assert "a bug on rank 1" in done.stderr and "[rank 1] unhandled error" in done.stderr
