"""MPI start-up at a chosen thread level, the job's topology and run metadata, and the
entry-point guard that turns errors into one message and a shared exit code.

mpi4py initialises MPI when ``mpi4py.MPI`` is first imported, so ``init_mpi`` must run
before any module that imports it (the CLI imports those lazily for that reason).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import sys
import time
import traceback
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from collectives.shape import JobShape
from osu_dl_bench import __version__
from osu_dl_bench.errors import UsageError, ValidationFailure

THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
# Why single by default: on MPICH, MULTIPLE adds ~2.7 us per call and disables the
# shared-memory allreduce (measured on the reference machine).
DEFAULT_THREAD_LEVEL = "single"


# MPICH's shared-memory collectives busy-poll: with more ranks than cores one call can
# take a second. Their "mpir" fallback does not (measured on the reference machine).
OVERSUBSCRIBED_CVARS = {
    "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM": "mpir",
    "MPIR_CVAR_BCAST_POSIX_INTRA_ALGORITHM": "mpir",
    "MPIR_CVAR_REDUCE_POSIX_INTRA_ALGORITHM": "mpir",
    "MPIR_CVAR_BARRIER_POSIX_INTRA_ALGORITHM": "mpir",
}
# A Slurm step announces its own layout (SLURM_STEP_TASKS_PER_NODE, e.g. "2(x3)"); the
# job's SLURM_NTASKS_PER_NODE can be larger than a step started with fewer tasks.
_LOCAL_SIZE_VARS = (
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
)


def utc_now() -> str:
    """The current UTC time to the second (ISO 8601), as every record and file dates."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def local_rank_count() -> int | None:
    """Ranks on this host as the launcher announced it, before MPI is initialised."""
    for var in _LOCAL_SIZE_VARS:
        value = os.environ.get(var, "")
        count = _slurm_local_count(value) if var.startswith("SLURM_") else None
        if count is None and value.isdigit():
            count = int(value)
        if count is not None:
            return count
    return None


def _slurm_local_count(value: str) -> int | None:
    """This node's entry of a Slurm per-node task list ('3,2(x2)'), by SLURM_NODEID."""
    try:
        per_node = parse_tasks_per_node(value)
    except ValueError:
        return None
    node = os.environ.get("SLURM_NODEID", "0")
    index = int(node) if node.isdigit() else 0
    return per_node[index] if index < len(per_node) else None


def avoid_busy_polling_when_oversubscribed() -> bool:
    """Set OVERSUBSCRIBED_CVARS (unless the user set them) when ranks outnumber cores."""
    local = local_rank_count()
    if local is None or local <= (os.cpu_count() or 1):
        return False
    for name, value in OVERSUBSCRIBED_CVARS.items():
        os.environ.setdefault(name, value)
    return True


# How long a rank that hit an error nobody agreed on waits for the others to fail too
# before it aborts the job: ranks raising the same error reach it within milliseconds
# (seconds when oversubscribed); one rank alone never sees the others come.
SETTLE_SECONDS = 10.0

# A duplicate of COMM_WORLD made at start-up, on which ranks agree about errors: its
# traffic can never match a collective the others are blocked in on another communicator.
_errors_comm = None
# The subcommand this process runs (set by the CLI), compared across ranks at start-up:
# ranks of one MPMD launch running different commands would make unmatched calls.
_command: str | None = None

# Environment variables that change which calls a rank makes, compared with the options.
SHARED_ENVIRONMENT = ("OSU_DL_BENCH_RANKS_PER_NODE", "OSU_DL_BENCH_FORCE_ALGORITHM")


def set_command(name: str) -> None:
    """Name the subcommand this process runs, for the start-up agreement."""
    global _command
    _command = name


# mpi4py reads its rc options from the environment too, and the environment wins.
THREAD_LEVEL_ENV = "MPI4PY_RC_THREAD_LEVEL"


def init_mpi(thread_level: str = DEFAULT_THREAD_LEVEL, pending: UsageError | None = None):
    """Initialise MPI at ``thread_level`` (unless already initialised) and return mpi4py.MPI.

    The first call on each rank agrees with the others on errors met before MPI started
    (``pending``: bad options, a missing library, a file this rank cannot read): when any
    rank had one, every rank raises the same agreed UsageError.
    """
    if thread_level not in THREAD_LEVELS:
        raise UsageError(
            f"unknown thread level {thread_level!r}: expected one of {', '.join(THREAD_LEVELS)}"
        )
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.thread_level = thread_level
        avoid_busy_polling_when_oversubscribed()
    from mpi4py import MPI

    _agree_at_start_up(MPI, pending)
    return MPI


def raise_environment_thread_level(needed: str) -> str | None:
    """Replace a MPI4PY_RC_THREAD_LEVEL below ``needed`` by ``needed`` before MPI starts,
    for a command that cannot run below it (a higher level is kept: it only costs speed);
    returns the level it asked for, if replaced (an unknown value is left to mpi4py)."""
    asked = os.environ.get(THREAD_LEVEL_ENV, "").strip().lower()
    if asked in THREAD_LEVELS and THREAD_LEVELS.index(asked) < THREAD_LEVELS.index(needed):
        os.environ[THREAD_LEVEL_ENV] = needed
        return asked
    return None


class StartFailure(UsageError):
    """A failure before MPI started that is not bad input (a bug, the system): settled
    with the other ranks as a usage error is, but exit code 1."""


def _agree_at_start_up(mpi, pending: UsageError | None) -> None:
    """Once per process: make the errors comm and exchange start-up errors over it."""
    global _errors_comm
    if _errors_comm is not None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    _errors_comm = mpi.COMM_WORLD.Dup()
    failed = isinstance(pending, StartFailure)
    everyone = _errors_comm.allgather((str(pending) if pending else None, _command, failed))
    message = joint_error([m for m, *_ in everyone]) or _different_commands(everyone)
    if message:
        kind = StartFailure if any(f for *_, f in everyone) else UsageError
        raise kind(message, agreed=True)


def _different_commands(everyone: list[tuple]) -> str | None:
    """A message naming the first rank that runs another command than rank 0, if any."""
    first = everyone[0][1]
    for rank, (_, command, *_) in enumerate(everyone):
        if command != first:
            return (
                f"rank {rank} runs {command or 'no osu-dl-bench command'}, rank 0 runs "
                f"{first or 'no osu-dl-bench command'}: every rank must run the same command"
            )
    return None


def joint_error(messages: list[str | None]) -> str | None:
    """One message for the errors ranks reported (None where a rank had none): the
    message alone when every rank gave it, else the first failing rank's, named."""
    failed = [(rank, m) for rank, m in enumerate(messages) if m]
    if not failed:
        return None
    rank, message = failed[0]
    if len(failed) == len(messages) and all(m == message for _, m in failed):
        return message
    others = len(failed) - 1
    also = f" (and {others} other rank{'s' * (others > 1)})" if others else ""
    return f"rank {rank}{also}: {message}"


def launcher_size() -> int:
    """Ranks in the job as the launcher (mpiexec, srun) announced them, before MPI is
    initialised; 1 outside a launch (a batch script's own SLURM_NTASKS does not count)."""
    names = ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE"]
    if "PMIX_RANK" in os.environ:  # srun --mpi=pmix sets no PMI_SIZE
        names.append("SLURM_STEP_NUM_TASKS")
    for var in names:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 1


def thread_level_name(level: int) -> str:
    """'single' .. 'multiple' for an MPI.THREAD_* constant."""
    from mpi4py import MPI

    names = {
        MPI.THREAD_SINGLE: "single",
        MPI.THREAD_FUNNELED: "funneled",
        MPI.THREAD_SERIALIZED: "serialized",
        MPI.THREAD_MULTIPLE: "multiple",
    }
    return names.get(level, str(level))


# Rank variables set by the launchers we know, read before MPI is initialised.
_LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def launcher_rank() -> int:
    """This process's rank as the launcher (mpiexec, srun) announced it; 0 if none did."""
    for var in _LAUNCHER_RANK_VARS:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


def world_rank() -> int:
    """This process's rank in COMM_WORLD, without initialising MPI as a side effect."""
    if "mpi4py.MPI" not in sys.modules:
        return launcher_rank()
    from mpi4py import MPI

    if MPI.Is_initialized() and not MPI.Is_finalized():
        return MPI.COMM_WORLD.Get_rank()
    return launcher_rank()


@dataclass(frozen=True)
class Topology:
    """Where the ranks of a communicator live: nodes, ranks per node, host names."""

    nprocs: int
    nodes: int
    ppn: int
    hostnames: tuple[str, ...]
    emulated: bool = False
    # Each rank's node, in rank order: its host name (on emulated nodes, the node's index).
    rank_nodes: tuple[str, ...] = ()

    @property
    def shape(self) -> JobShape:
        """The job's shape (ranks, nodes, ranks per node)."""
        return JobShape(self.nprocs, self.nodes, self.ppn)


def discover_topology(comm, ranks_per_node: int | None = None) -> Topology:
    """Nodes from MPI_Comm_split_type(SHARED), or K-rank emulated nodes on one host
    (``ranks_per_node``, else OSU_DL_BENCH_RANKS_PER_NODE); also sets the emulation for
    the hierarchical algorithms bound afterwards."""
    from mpi4py import MPI

    from collectives.topology import (
        emulated_ranks_per_node,
        set_emulated_ranks_per_node,
        split_nodes,
    )

    if ranks_per_node:
        set_emulated_ranks_per_node(ranks_per_node)
    agree_on_errors(comm, emulated_ranks_per_node)  # a bad variable on any rank stops all
    names = comm.allgather(MPI.Get_processor_name())
    nodes = split_nodes(comm)
    try:
        ppn = comm.allreduce(nodes.local.Get_size(), op=MPI.MAX)
    finally:
        nodes.local.Free()
        if nodes.leaders != MPI.COMM_NULL:
            nodes.leaders.Free()
    emulated = emulated_ranks_per_node() is not None
    rank_nodes = comm.allgather(f"emulated-node{nodes.node}" if emulated else names[comm.rank])
    hostnames = tuple(sorted(set(names)))
    return Topology(comm.Get_size(), nodes.nodes, ppn, hostnames, emulated, tuple(rank_nodes))


@dataclass(frozen=True)
class SlurmJob:
    """The Slurm job (and step) this process runs in, as its SLURM_* variables describe it."""

    job_id: str
    step_id: str
    nodes: int
    ntasks: int
    tasks_per_node: tuple[int, ...]  # per node, in node order

    @property
    def ntasks_per_node(self) -> int:
        """The most tasks on one node (Slurm's --ntasks-per-node for an even layout)."""
        return max(self.tasks_per_node, default=0)


def parse_tasks_per_node(text: str) -> tuple[int, ...]:
    """SLURM_TASKS_PER_NODE's compressed form, '2(x3),1' -> (2, 2, 2, 1)."""
    counts: list[int] = []
    for item in filter(None, text.split(",")):
        count, _, repeat = item.partition("(x")
        if not count.isdigit() or (repeat and not repeat.removesuffix(")").isdigit()):
            raise ValueError(f"SLURM_TASKS_PER_NODE: expected items like 4 or 2(x3), got {item!r}")
        counts += [int(count)] * (int(repeat.removesuffix(")")) if repeat else 1)
    return tuple(counts)


def slurm_job(env: Mapping[str, str] | None = None) -> SlurmJob | None:
    """The Slurm job from SLURM_JOB_ID, SLURM_JOB_NUM_NODES, SLURM_NTASKS and
    SLURM_TASKS_PER_NODE (a step's own layout inside srun); None outside Slurm."""
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID", "")
    if not job_id:
        return None
    try:
        per_node = parse_tasks_per_node(env.get("SLURM_TASKS_PER_NODE", ""))
    except ValueError:
        per_node = ()  # a layout we cannot read must not stop the run: record none
    nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES", "")
    ntasks = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS", "")
    return SlurmJob(
        job_id=job_id,
        step_id=env.get("SLURM_STEP_ID", ""),
        nodes=int(nodes) if nodes.isdigit() else len(per_node),
        ntasks=int(ntasks) if ntasks.isdigit() else sum(per_node),
        tasks_per_node=per_node,
    )


@dataclass(frozen=True)
class RunMetadata:
    """What a result needs to be reproduced and compared: library, versions, hosts, time."""

    mpi_library: str
    mpi_version: str
    mpi4py_version: str
    thread_level: str
    hostnames: str
    package_version: str
    timestamp: str
    command: str
    # MPICH shared-memory settings in force (set for oversubscribed runs).
    mpich_posix_cvars: str
    # The Slurm job the run belongs to ("" outside Slurm), so results can be traced to it.
    slurm_job_id: str = ""
    slurm_nodes: str = ""
    slurm_ntasks_per_node: str = ""

    def as_dict(self) -> dict[str, str]:
        """Plain dict, for records and metadata files."""
        return asdict(self)


def collect_metadata(topology: Topology) -> RunMetadata:
    """Metadata of the current run (same on every rank)."""
    import mpi4py
    from mpi4py import MPI

    major, minor = MPI.Get_version()
    slurm = slurm_job()
    return RunMetadata(
        mpi_library=library_version_line(MPI),
        mpi_version=f"{major}.{minor}",
        mpi4py_version=mpi4py.__version__,
        thread_level=thread_level_name(MPI.Query_thread()),
        hostnames=",".join(topology.hostnames),
        package_version=__version__,
        timestamp=utc_now(),
        command=" ".join(sys.argv),
        mpich_posix_cvars=",".join(
            f"{k}={os.environ[k]}" for k in OVERSUBSCRIBED_CVARS if k in os.environ
        ),
        slurm_job_id=slurm.job_id if slurm else "",
        slurm_nodes=str(slurm.nodes) if slurm else "",
        slurm_ntasks_per_node=str(slurm.ntasks_per_node) if slurm else "",
    )


def on_rank0(comm, write: Callable[[], object]) -> object:
    """Rank 0 writes (its result; None elsewhere); a failed write (a full disk: a
    UsageError) stops every rank of ``comm`` with its message, so none waits for rank 0
    in the next collective."""
    result, message = None, None
    if comm.Get_rank() == 0:
        try:
            result = write()
        except UsageError as exc:
            message = str(exc)
    message = comm.bcast(message, root=0)
    if message:
        raise UsageError(message, agreed=True)
    return result


def agree_on_errors(comm, step: Callable[[], object]) -> object:
    """Run ``step`` on every rank; if it raises UsageError on any rank, raise it on all.

    Used for checks whose verdict might differ between ranks (a file one node cannot
    read, a device present on one node only), so no rank is left waiting in a
    collective. ``step`` must not communicate: a rank that failed is not there.
    """
    try:
        result, message = step(), None
    except UsageError as exc:
        result, message = None, str(exc)
    joint = joint_error(comm.allgather(message))
    if joint:
        raise UsageError(joint, agreed=True)
    return result


def file_fingerprint(path: str, option: str) -> str:
    """``path`` with the SHA-256 of its bytes, for comparing a file across ranks (nodes
    may hold different copies under one name); UsageError naming ``option`` if it is not
    a regular file this rank can read (a FIFO would block the read forever)."""
    from osu_dl_bench.jsonfile import UnreadableJson, read_regular_file

    try:
        data = read_regular_file(path)
    except UnreadableJson as exc:
        raise UsageError(f"{option} {path}: {exc}") from None
    return f"{path} (sha256 {hashlib.sha256(data).hexdigest()[:16]})"


def agree_on_settings(comm, settings: Mapping[str, object]) -> None:
    """Raise one agreed UsageError on every rank unless every rank holds the same
    ``settings`` (option name -> value): ranks started with different sizes, types or
    algorithms (an MPMD launch, a table that differs between nodes) would otherwise make
    different calls and wait for each other forever, or overrun each other's buffers."""
    shared = {**settings, **{f"${name}": os.environ.get(name) for name in SHARED_ENVIRONMENT}}
    everyone = comm.allgather(shared)
    for rank, theirs in enumerate(everyone):
        for name, value in everyone[0].items():
            if theirs.get(name) != value:
                raise UsageError(
                    f"rank {rank} runs with {name} {theirs.get(name)!r}, rank 0 with "
                    f"{value!r}: every rank must be given the same command",
                    agreed=True,
                )


def wait_politely(comm, pause_s: float = 0.005) -> None:
    """A barrier over ``comm`` that sleeps instead of spinning: ranks idle while others
    measure must not steal their cores (every rank of ``comm`` must call this one, not
    MPI_Barrier: a blocking and a non-blocking barrier do not match)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(pause_s)


def run_guarded(body: Callable[[], int]) -> int:
    """Run an MPI entry point: usage errors -> one message from rank 0, exit 2 on every
    rank (an error only some ranks met -> message from each of them, MPI_Abort);
    validation failures -> exit 1; anything else -> traceback from that rank and exit 1:
    before MPI started, every rank's, with one message (the others wait in MPI_Init for
    it); after, by MPI_Abort."""
    try:
        return body()
    except UsageError as exc:
        return _usage_error_exit(exc, code=1 if isinstance(exc, StartFailure) else 2)
    except ValidationFailure as exc:
        if world_rank() == 0:
            print(exc, flush=True)
        return 1
    except BrokenPipeError:
        # The reader of our output went away (`| head`): no traceback; the other ranks
        # would wait for this one forever, so a multi-rank job still ends.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        _abort_if_others_wait()
        return 1
    except Exception as exc:
        if _is_collective_error(exc):
            # The ranks passed one call inconsistent arguments (MPI's "erroneous
            # program"): the user's mistake, refused before anything was copied.
            return _usage_error_exit(UsageError(str(exc)))
        rank = world_rank()
        if "mpi4py.MPI" not in sys.modules and launcher_size() > 1:
            # Before MPI started, the other ranks wait in MPI_Init for this one: start it
            # and share the failure, so every rank ends with one message instead of a hang.
            traceback.print_exc()
            return _usage_error_exit(StartFailure(f"{type(exc).__name__}: {exc}"), code=1)
        if _is_mpi_error(exc):
            # The library refused a call (a truncated message: ranks passed one call
            # different counts): its own words say what; our stack adds nothing.
            _say_error(f"rank {rank}: the MPI library failed a call: {exc}; aborting the job")
        else:
            sys.stderr.write(f"[rank {rank}] unhandled error, aborting the job:\n")
            traceback.print_exc()
            sys.stderr.flush()
        _abort_if_others_wait(always=True)
        return 1


def _is_mpi_error(exc: Exception) -> bool:
    """Whether ``exc`` is an error the MPI library returned (mpi4py's MPI.Exception)."""
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and isinstance(exc, mpi.Exception)


def _is_collective_error(exc: Exception) -> bool:
    """Whether ``exc`` is the collectives library's refusal of a call's arguments (read
    from sys.modules: importing the library here would start MPI before init_mpi)."""
    errors = sys.modules.get("collectives.errors")
    return errors is not None and isinstance(exc, errors.CollectiveError)


def _usage_error_exit(exc: UsageError, code: int = 2) -> int:
    """Exit ``code`` (2: bad input) with one message from rank 0 once every rank agrees it
    failed; otherwise this rank says what it met and aborts the job, which would wait
    forever."""
    message = str(exc) if exc.agreed else _settle(exc)
    if message is not None:
        if world_rank() == 0:
            _say_error(message)
        return code
    _say_error(f"rank {world_rank()}: {exc} (the other ranks did not fail: aborting the job)")
    _abort_if_others_wait(always=True, code=code)
    return code


def _say_error(message: str) -> None:
    print(f"osu-dl-bench: error: {printable(message)}", file=sys.stderr, flush=True)


def printable(text: str) -> str:
    """``text`` with terminal controls escaped (a path or value echoed in a message could
    otherwise move the cursor, recolour or reorder what the user reads); newlines stay."""
    return "".join(ch if ch == "\n" or not _is_control(ch) else ascii(ch)[1:-1] for ch in text)


def library_version_line(mpi) -> str:
    """The first line of MPI_Get_library_version, controls as spaces: Open MPI's text
    carries its C string's NUL (dropped), which ended up inside written files."""
    lines = mpi.Get_library_version().replace("\0", "").strip().splitlines() or [""]
    return "".join(" " if _is_control(ch) else ch for ch in lines[0]).strip()


def _is_control(ch: str) -> bool:
    """C0/C1 controls, DEL and Unicode format characters (bidi overrides among them)."""
    return unicodedata.category(ch) in ("Cc", "Cf")


def _settle(exc: UsageError) -> str | None:
    """The joint message if every rank failed too (before MPI: exchanged at start-up;
    after: within SETTLE_SECONDS), None if they did not."""
    if "mpi4py.MPI" not in sys.modules and launcher_size() == 1:
        return str(exc)
    if _errors_comm is None:
        try:
            init_mpi(pending=exc)
        except UsageError as agreed:
            return str(agreed)
        if _errors_comm is None:  # MPI could not be started or was already finalized
            return str(exc) if launcher_size() == 1 else None
    if _errors_comm.Get_size() == 1:
        return str(exc)
    return _settle_late(str(exc))


def _settle_late(message: str) -> str | None:
    """After start-up: wait (bounded) for every rank to reach this point, then share."""
    request = _errors_comm.Ibarrier()
    deadline = time.monotonic() + SETTLE_SECONDS
    while not request.Test():
        if time.monotonic() > deadline:
            return None  # the job is aborted next: the pending request goes with it
        time.sleep(0.001)
    return joint_error(_errors_comm.allgather(message))


# Seconds between the last message of an aborting rank and MPI_Abort (see below).
ABORT_GRACE_S = 0.5


def _abort_if_others_wait(always: bool = False, code: int = 1) -> None:
    """MPI_Abort the job (if MPI is up, and with ``always`` unset only if it has other
    ranks), so no rank is left waiting for one that stopped."""
    if "mpi4py.MPI" not in sys.modules:
        return
    from mpi4py import MPI

    running = MPI.Is_initialized() and not MPI.Is_finalized()
    if running and (always or MPI.COMM_WORLD.Get_size() > 1):
        # MPI_Abort has the launcher kill every rank and its own forwarders, which drop
        # what is still in their pipes: MPICH's Hydra lost the message explaining the abort
        # (and its own "Abort(2)" line) on a loaded machine. Flush, then give the forwarder
        # a moment: this path ends the job, so the pause costs nothing else.
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(ABORT_GRACE_S)
        MPI.COMM_WORLD.Abort(code)
