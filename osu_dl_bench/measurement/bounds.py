"""What bench --bounds times beside the algorithms, size by size, in the same interleaved
rounds (kernel.measure_osu's ``unchecked`` calls): what moving the message costs without
any communication.

- ``copy`` (host buffers): numpy's copy of the message into another buffer, a memcpy. A
  collective that must read its input and write its output once moves the message no
  faster on one process, so at p = 1 it is a ceiling of the algorithm bandwidth. Its
  algbw counts the bytes copied.
- ``memcpy`` (-d cuda): the device's memcpy of the message into another device buffer.
  cupy's ``target[...] = source`` on same-shape contiguous arrays is one
  ``cudaMemcpyAsync(..., cudaMemcpyDefault)`` (cupy/_core/_routines_indexing.pyx and
  cupy/cuda/memory.pyx), and so is NCCL at p = 1 (ncclLaunchOneRank, NCCL
  src/enqueue.cc and src/device/onerank.cu): there NCCL and this bound are the same call,
  and any difference between them is timing noise. Records written before this bound was
  named ``memcpy`` call it ``copy``: ``description`` reads both.
- ``copy-kernel`` (-d cuda): the same copy done by a kernel on the SMs (a cupy
  ElementwiseKernel ``y = x``, one element per thread), beside the runtime's memcpy: how
  far a collective's own copy kernel can go, and whether the memcpy path is faster.
- ``staging`` (-d cuda, where MPI is not CUDA-aware): the copies a staged MPI call pays
  around the call itself, only where the collective reads and writes (collectives.device
  .staged around a call that does nothing; a bcast: the root's buffer to the host, the
  others' back). A staged algorithm's time less this is the time MPI spent.

None is checked (they compute nothing) and none is an algorithm the tables can choose:
their records carry the backend ``bound``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.device import needs_staging, staged
from collectives.registry import CollectiveCall
from collectives.specs import CollectiveSpec

COPY = "copy"
MEMCPY = "memcpy"
COPY_KERNEL = "copy-kernel"
STAGING = "staging"
BACKEND = "bound"
DESCRIPTIONS = {
    COPY: "numpy's copy of the message into another host buffer (a memcpy)",
    MEMCPY: "the device's memcpy of the message into another device buffer "
    "(cudaMemcpyAsync device to device; NCCL at p = 1 is this same call)",
    COPY_KERNEL: "a copy kernel on the SMs (cupy ElementwiseKernel y = x) of the message "
    "into another device buffer",
    STAGING: "a staged MPI call's copies alone, where the collective reads and writes: "
    "to pinned host memory and back to the device",
}
# Records of -d cuda runs before the device's bound was named memcpy called it copy.
_OLD_DEVICE_COPY = (
    "one copy of the message on the device (recorded as 'copy': cupy's target[...] = "
    "source, the device's memcpy, cudaMemcpyAsync device to device)"
)


def description(name: str, device: str) -> str:
    """What the bound ``name`` of a run on ``device`` timed, in words."""
    if name == COPY and device == "cuda":
        return _OLD_DEVICE_COPY
    return DESCRIPTIONS[name]


def bound_labels(device: str) -> tuple[str, ...]:
    """The bounds timed on ``device``: the host's copy, or on a GPU the device's memcpy
    and a copy kernel, with the staging copies where MPI's algorithms stage (a GPU, an
    MPI that is not CUDA-aware)."""
    if device != "cuda":
        return (COPY,)
    return (MEMCPY, COPY_KERNEL, STAGING) if needs_staging(device, "mpi") else (MEMCPY, COPY_KERNEL)


def bound_calls(
    device: str, xp: Any, count: int, dtype: np.dtype, spec: CollectiveSpec, rank: int
) -> list[CollectiveCall]:
    """The calls of ``bound_labels(device)`` for a message of ``count`` elements of a
    ``spec`` collective on ``rank`` (the staging bound copies where that collective does)."""
    source, target = xp.zeros(count, dtype), xp.empty(count, dtype)

    def copy(send, recv, op, root) -> None:
        """One copy of the message (the call's own buffers are not touched): numpy's
        memcpy, or on cupy one cudaMemcpyAsync device to device."""
        # The loop waits for the device before it stops the clock (kernel.timed_round).
        target[...] = source

    if device != "cuda":
        return [copy]
    kernel = _copy_kernel(xp)

    def copy_kernel(send, recv, op, root) -> None:
        """One copy of the message by a kernel on the SMs."""
        kernel(source, target)

    calls = [copy, copy_kernel]
    if STAGING in bound_labels(device):
        calls.append(staged(_no_call, flow=spec.flow, rank=rank))
    return calls


def _copy_kernel(xp: Any) -> Any:
    """cupy's elementwise kernel ``y = x`` (compiled once per dtype, on first call)."""
    return xp.ElementwiseKernel("T x", "T y", "y = x", "osu_dl_bench_copy")


def bound_bytes(message_bytes: int) -> int:
    """Memory the copy bounds add to one rank at a message size: the two buffers they
    share, on the host or, on a GPU, in device memory. The staging bound's pinned mirrors,
    a send block shared with the algorithms and its receive mirror, are counted as one
    more staged call's (measurement.memory.staging_need)."""
    return 2 * message_bytes


def _no_call(send, recv, op, root) -> None:
    """A collective that does nothing: staged, only the staging copies remain."""
    return None
