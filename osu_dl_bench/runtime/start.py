"""MPI start-up at a chosen thread level, and the agreement on errors met before it: the
first ``init_mpi`` on each rank makes a duplicate of COMM_WORLD for errors and exchanges
what every rank met so far (bad options, a missing library, another command).

mpi4py initialises MPI when ``mpi4py.MPI`` is first imported, so ``init_mpi`` must run
before any module that imports it (the CLI imports those lazily for that reason).
"""

from __future__ import annotations

import os
import sys

from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime.launcher import avoid_busy_polling_when_oversubscribed
from osu_dl_bench.runtime.rank_agreement import joint_error
from osu_dl_bench.runtime.text import printable

THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
# Why single by default: on MPICH, MULTIPLE adds ~2.7 us per call and disables the
# shared-memory allreduce (measured on the reference machine).
DEFAULT_THREAD_LEVEL = "single"
# mpi4py reads its rc options from the environment too, and the environment wins.
THREAD_LEVEL_ENV = "MPI4PY_RC_THREAD_LEVEL"

# A duplicate of COMM_WORLD made at start-up, on which ranks agree about errors: its
# traffic can never match a collective the others are blocked in on another communicator.
_errors_comm = None
# The subcommand this process runs (set by the CLI), compared across ranks at start-up:
# ranks of one MPMD launch running different commands would make unmatched calls.
_command: str | None = None


class StartFailure(UsageError):
    """A failure before MPI started that is not bad input (a bug, the system): settled
    with the other ranks as a usage error is, but exit code 1."""


def set_command(name: str) -> None:
    """Name the subcommand this process runs, for the start-up agreement."""
    global _command
    _command = name


def errors_comm():
    """The communicator ranks agree on errors over; None until ``init_mpi`` made it."""
    return _errors_comm


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
        pending = pending or _unknown_environment_thread_level(thread_level)
    from mpi4py import MPI

    _agree_at_start_up(MPI, pending)
    return MPI


def _unknown_environment_thread_level(thread_level: str) -> UsageError | None:
    """The error of a MPI4PY_RC_THREAD_LEVEL that names no thread level (mpi4py warns and
    starts at its default: the run would measure at a level nobody asked for), agreed
    with the other ranks at start-up; MPI starts at ``thread_level`` to say so."""
    asked = os.environ.get(THREAD_LEVEL_ENV)
    if asked is None or asked.strip().lower() in THREAD_LEVELS:
        return None
    os.environ[THREAD_LEVEL_ENV] = thread_level  # mpi4py reads it when MPI starts
    return UsageError(
        f"{THREAD_LEVEL_ENV}={printable(asked)[:40]!r}: expected one of "
        f"{', '.join(THREAD_LEVELS)} (or unset it)"
    )


def raise_environment_thread_level(needed: str) -> str | None:
    """Replace a MPI4PY_RC_THREAD_LEVEL below ``needed`` by ``needed`` before MPI starts,
    for a command that cannot run below it (a higher level is kept: it only costs speed);
    returns the level it asked for, if replaced (an unknown value is left to mpi4py)."""
    asked = os.environ.get(THREAD_LEVEL_ENV, "").strip().lower()
    if asked in THREAD_LEVELS and THREAD_LEVELS.index(asked) < THREAD_LEVELS.index(needed):
        os.environ[THREAD_LEVEL_ENV] = needed
        return asked
    return None


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
