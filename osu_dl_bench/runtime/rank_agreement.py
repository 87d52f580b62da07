"""What every rank of a job must agree on, so that none is left waiting in a collective
the others never reach: errors some ranks met, the settings they run with, the files
they read, and rank 0's writes."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping

from osu_dl_bench.errors import UsageError

# Environment variables that change which calls a rank makes, compared with the options.
SHARED_ENVIRONMENT = ("OSU_DL_BENCH_RANKS_PER_NODE", "OSU_DL_BENCH_FORCE_ALGORITHM")


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
