"""The entry-point guard: an MPI entry point's errors become one message and an exit code
shared by every rank, or an MPI_Abort when only some ranks failed, so none is left
waiting for a rank that stopped."""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable

from osu_dl_bench.errors import UsageError, ValidationFailure
from osu_dl_bench.runtime.launcher import launcher_size, world_rank
from osu_dl_bench.runtime.rank_agreement import joint_error
from osu_dl_bench.runtime.start import StartFailure, errors_comm, init_mpi
from osu_dl_bench.runtime.text import printable

# How long a rank that hit an error nobody agreed on waits for the others to fail too
# before it aborts the job: ranks raising the same error reach it within milliseconds
# (seconds when oversubscribed); one rank alone never sees the others come.
SETTLE_SECONDS = 10.0
# Seconds between the last message of an aborting rank and MPI_Abort (see below).
ABORT_GRACE_S = 0.5


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
    except KeyboardInterrupt:
        # Ctrl-C in a command's first seconds (imports, the planner): no traceback. A
        # terminal sends SIGINT to every process of the job, so rank 0 alone says it; 130
        # is the shell's code for a command ended by SIGINT (128 + 2).
        if world_rank() == 0:
            print("\nosu-dl-bench: interrupted", file=sys.stderr, flush=True)
        return 130
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
    """The one error line, control characters made printable."""
    print(f"osu-dl-bench: error: {printable(message)}", file=sys.stderr, flush=True)


def _settle(exc: UsageError) -> str | None:
    """The joint message if every rank failed too (before MPI: exchanged at start-up;
    after: within SETTLE_SECONDS), None if they did not."""
    if "mpi4py.MPI" not in sys.modules and launcher_size() == 1:
        return str(exc)
    if errors_comm() is None:
        try:
            init_mpi(pending=exc)
        except UsageError as agreed:
            return str(agreed)
        if errors_comm() is None:  # MPI could not be started or was already finalized
            return str(exc) if launcher_size() == 1 else None
    if errors_comm().Get_size() == 1:
        return str(exc)
    return _settle_late(str(exc))


def _settle_late(message: str) -> str | None:
    """After start-up: wait (bounded) for every rank to reach this point, then share."""
    comm = errors_comm()
    request = comm.Ibarrier()
    deadline = time.monotonic() + SETTLE_SECONDS
    while not request.Test():
        if time.monotonic() > deadline:
            return None  # the job is aborted next: the pending request goes with it
        time.sleep(0.001)
    return joint_error(comm.allgather(message))


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
