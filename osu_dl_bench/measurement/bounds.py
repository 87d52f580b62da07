"""What bench --bounds times beside the algorithms, size by size, through the same loop
(kernel.timed_round): what moving the message costs without any communication.

- ``copy``: one copy of the message into another buffer on the same device (numpy's
  memcpy on the host, cupy's copy kernel on a GPU). A collective that must read its input
  and write its output once moves the message no faster on one process, so at p = 1 it
  is a ceiling of the algorithm bandwidth. Its algbw counts the bytes copied.
- ``staging`` (-d cuda, where MPI is not CUDA-aware): the copies a staged MPI call pays
  around the call itself: the send buffer to pinned host memory and the result back
  (collectives.device.staged around a call that does nothing). A staged algorithm's
  time less this is the time MPI spent.

Neither is checked (they compute nothing) and neither is an algorithm the tables can
choose: their records carry the backend ``bound``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.device import needs_staging, staged
from collectives.registry import CollectiveCall

COPY = "copy"
STAGING = "staging"
BACKEND = "bound"
DESCRIPTIONS = {
    COPY: "one copy of the message into another buffer on the same device",
    STAGING: "a staged MPI call's copies alone: send buffer to pinned host memory, "
    "result back to the device",
}


def bound_labels(device: str) -> tuple[str, ...]:
    """The bounds timed on ``device``: the copy, and the staging copies where MPI's
    algorithms stage (a GPU, an MPI that is not CUDA-aware)."""
    return (COPY, STAGING) if needs_staging(device, "mpi") else (COPY,)


def bound_calls(device: str, xp: Any, count: int, dtype: np.dtype) -> list[CollectiveCall]:
    """The calls of ``bound_labels(device)`` for a message of ``count`` elements."""
    source, target = xp.zeros(count, dtype), xp.empty(count, dtype)

    def copy(send, recv, op, root) -> None:
        """One copy of the message (the call's own buffers are not touched)."""
        # As the kernel restores inputs (Inputs.reset); the loop waits for the device
        # before it stops the clock (kernel.timed_round).
        target[...] = source

    calls = [copy]
    if STAGING in bound_labels(device):
        calls.append(staged(_no_call))
    return calls


def bound_bytes(message_bytes: int) -> int:
    """Memory the copy bounds add to one rank at a message size: the two buffers they
    share, on the host or, on a GPU, in device memory. The staging bound's pinned mirrors,
    a send block shared with the algorithms and its receive mirror, are counted as one
    more staged call's (measurement.memory.staging_need)."""
    return 2 * message_bytes


def _no_call(send, recv, op, root) -> None:
    """A collective that does nothing: staged, only the staging copies remain."""
    return None
