"""``gloo``: torch.distributed's Gloo collectives on host memory, a second real collective
library beside MPI (the stand-in for NCCL in CPU-only runs of the NCCL-vs-MPI selection).

Set-up (once per communicator, at bind time): rank and size come from the MPI
communicator; rank 0 starts a ``TCPStore`` and every rank then builds one
``ProcessGroupGloo`` on that store, each step bounded and its failure one message on every
rank (backends/rendezvous.py: the store's address, each rank's device, the timeout).
The group is
cached on the communicator (``backends.cached_on_comm``), so every collective bound on the
same communicator shares it; it is released, after a barrier, when the communicator is
freed or at exit.
``torch.distributed``'s default group (``init_process_group``, once per process) is not used.

Buffers are wrapped, never converted (``torch.from_numpy``). Collectives that only move
data go through a byte view, so they take every dtype. The only copies are the ones Gloo's
API forces: its allreduce and reduce work in place, so an out-of-place call first copies
the input into the buffer reduced; in-place allgather, gather and alltoall copy this rank's
input to scratch, and in-place reduce_scatter takes its result through scratch, since Gloo
does not promise that input and output may overlap.

Constraints (probed with torch 2.13 at p = 2 and 3): host (cpu) buffers; reductions only on
float16, float32, float64, int8, uint8, int32 and int64 (Gloo raises "Invalid scalar type"
for int16, uint32, uint64); ops sum, prod, max, min, and band/bor/bxor on integers only.
Cost: not modelled (``cost=None``): Gloo picks its own algorithms, so it is measured.

Sources: torch/csrc/distributed/c10d/ProcessGroupGloo.cpp and init.cpp (the Python
bindings used here: ``TCPStore``, ``ProcessGroupGloo(store, rank, size, options)``,
``_allgather_base`` and ``_reduce_scatter_base``, which back ``all_gather_into_tensor`` and
``reduce_scatter_tensor``).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives import mpi
from collectives.backends import cached_on_comm, rendezvous
from collectives.common import Scratch
from collectives.registry import (
    CPU_BUFFERS,
    UNAVAILABLE_BACKENDS,
    CallContext,
    Requirement,
    register,
)

if TYPE_CHECKING:
    from mpi4py import MPI

BACKEND = "gloo"
TORCH_MISSING = (
    "torch is not installed (pip install 'osu-dl-bench[gloo]' or torch==2.13.0 for the CPU build)"
)

# Our op name -> torch.distributed.ReduceOp member.
GLOO_OPS = {
    "sum": "SUM",
    "prod": "PRODUCT",
    "max": "MAX",
    "min": "MIN",
    "band": "BAND",
    "bor": "BOR",
    "bxor": "BXOR",
}
# Gloo's reductions are generated for these scalar types only (GENERATE_ALL_TYPES in
# ProcessGroupGloo.cpp); bfloat16 and bool too, which numpy has not.
GLOO_REDUCE_DTYPES = frozenset({"float16", "float32", "float64", "int8", "uint8", "int32", "int64"})


def _gloo_reduces(ctx: CallContext) -> bool:
    return ctx.etype.name in GLOO_REDUCE_DTYPES


def _gloo_has_op(ctx: CallContext) -> bool:
    op = ctx.op
    return op is None or (op.name in GLOO_OPS and (ctx.etype.is_integer or not op.integer_only))


GLOO_DTYPE = Requirement(
    "needs a dtype Gloo reduces (float16/32/64, int8, uint8, int32, int64)", _gloo_reduces
)
GLOO_OP = Requirement(
    "needs an op Gloo implements (sum, prod, max, min; band, bor, bxor on integers)",
    _gloo_has_op,
)


def unavailable_reason() -> str | None:
    """None if torch can be imported here, else why the gloo backend is missing (cheap:
    looks torch up without importing it, which takes seconds)."""
    return None if importlib.util.find_spec("torch") is not None else TORCH_MISSING


# --- the process group, one per communicator ---


def _all_on_one_host(comm: MPI.Comm) -> bool:
    """True if every rank of ``comm`` shares this rank's host (the same on every rank)."""
    local = comm.Split_type(mpi.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return local.Get_size() == comm.Get_size()
    finally:
        local.Free()


def _exchange(comm: MPI.Comm) -> rendezvous.Exchange:
    """Every rank's value over ``comm``, in rank order."""
    return comm.allgather


def _new_process_group(comm: MPI.Comm) -> Any:
    """A ProcessGroupGloo over the ranks of ``comm`` (collective over ``comm``)."""
    from torch.distributed import ProcessGroupGloo

    exchange = _exchange(comm)
    meeting = rendezvous.meeting_place(exchange, _all_on_one_host(comm))
    rank, size = comm.Get_rank(), comm.Get_size()
    store = rendezvous.store(exchange, rank, size, meeting)

    def group() -> Any:
        if meeting.device is None:
            # torch's own device choice: GLOO_SOCKET_IFNAME, else the host name's address.
            return ProcessGroupGloo(store, rank, size, meeting.timeout)
        options = ProcessGroupGloo._Options()
        # The device's address explicitly: the host name's may be one peers cannot
        # reach, or loopback.
        address = meeting.device.address
        options._devices = [ProcessGroupGloo.create_device(hostname=address)]
        options._timeout = meeting.timeout
        return ProcessGroupGloo(store, rank, size, options)

    what = f"the Gloo group did not start within {meeting.timeout.total_seconds():g} s"
    return rendezvous.agreed(exchange, what, group)


def process_group(comm: MPI.Comm) -> Any:
    """The Gloo process group of ``comm``, created on first use (collectively) and cached."""
    return cached_on_comm(comm, BACKEND, _new_process_group)


# --- the collectives: each maker runs at bind time and returns the per-call function ---


@dataclass(frozen=True)
class _Bound:
    """What every call maker needs: the group, this rank's place, torch and scratch."""

    pg: Any
    rank: int
    size: int
    from_numpy: Callable[[np.ndarray], Any]
    ops: dict[str, Any]
    scratch: Scratch


def _as_bytes(array: np.ndarray) -> np.ndarray:
    # Data-movement collectives need no arithmetic: moving bytes makes every dtype work.
    return array.view(np.uint8)


def _copy_to_scratch(b: _Bound, name: str, block: np.ndarray) -> np.ndarray:
    """A scratch copy of ``block``, for in-place calls whose input would alias the output."""
    copy = b.scratch.get(name, block.size, block)
    np.copyto(copy, block)
    return copy


def _allreduce(b: _Bound) -> Callable:
    def call(send, recv, op, root):
        if send is not None:
            np.copyto(recv, send)  # Gloo's allreduce works in place
        b.pg.allreduce(b.from_numpy(recv), b.ops[op.name]).wait()

    return call


def _bcast(b: _Bound) -> Callable:
    def call(send, recv, op, root):
        b.pg.broadcast(b.from_numpy(_as_bytes(recv)), root).wait()

    return call


def _reduce(b: _Bound) -> Callable:
    def call(send, recv, op, root):
        # Gloo reduces in place and leaves partial sums in the non-roots' buffers (seen with
        # torch 2.13): never the caller's send buffer, so non-roots work in scratch.
        work = recv if b.rank == root else b.scratch.get("reduce", send.size, send)
        if send is not None:
            np.copyto(work, send)
        b.pg.reduce(b.from_numpy(work), root, b.ops[op.name]).wait()

    return call


def _allgather(b: _Bound) -> Callable:
    def call(send, recv, op, root):
        if send is None:
            n = recv.size // b.size
            send = _copy_to_scratch(b, "allgather", recv[b.rank * n : (b.rank + 1) * n])
        b.pg._allgather_base(b.from_numpy(_as_bytes(recv)), b.from_numpy(_as_bytes(send))).wait()

    return call


def _reduce_scatter(b: _Bound) -> Callable:
    from torch.distributed import ReduceScatterOptions

    options = {}
    for name, torch_op in b.ops.items():
        options[name] = ReduceScatterOptions()
        options[name].reduceOp = torch_op

    def call(send, recv, op, root):
        if send is None:
            # In place: recv holds the whole input; the result goes to its first block.
            n = recv.size // b.size
            out = b.scratch.get("reduce_scatter", n, recv)
            b.pg._reduce_scatter_base(
                b.from_numpy(out), b.from_numpy(recv), options[op.name]
            ).wait()
            np.copyto(recv[:n], out)
        else:
            b.pg._reduce_scatter_base(
                b.from_numpy(recv), b.from_numpy(send), options[op.name]
            ).wait()

    return call


def _alltoall(b: _Bound) -> Callable:
    def call(send, recv, op, root):
        if send is None:
            send = _copy_to_scratch(b, "alltoall", recv)
        b.pg.alltoall_base(
            b.from_numpy(_as_bytes(recv)), b.from_numpy(_as_bytes(send)), [], []
        ).wait()

    return call


def _blocks(b: _Bound, array: np.ndarray) -> list:
    """The p per-rank blocks of ``array`` as tensors (empty ones too, unlike ``chunk``)."""
    return list(b.from_numpy(_as_bytes(array)).tensor_split(b.size))


def _gather(b: _Bound) -> Callable:
    def call(send, recv, op, root):
        if send is None:
            n = recv.size // b.size
            send = _copy_to_scratch(b, "gather", recv[b.rank * n : (b.rank + 1) * n])
        outputs = _blocks(b, recv) if b.rank == root else []
        b.pg.gather(outputs, b.from_numpy(_as_bytes(send)), root).wait()

    return call


def _scatter(b: _Bound) -> Callable:
    def call(send, recv, op, root):
        inputs = _blocks(b, send) if b.rank == root else []
        if recv is None:
            # In place at the root: its own block stays in send; Gloo still wants an output.
            recv = b.scratch.get("scatter", send.size // b.size, send)
        b.pg.scatter(b.from_numpy(_as_bytes(recv)), inputs, root).wait()

    return call


def _barrier(b: _Bound) -> Callable:
    def call(send, recv, op, root):
        b.pg.barrier().wait()

    return call


def _bind(make_call: Callable[[_Bound], Callable], comm: MPI.Comm) -> Callable:
    """The factory shared by every gloo collective: group, torch and scratch, then the call."""
    import torch
    from torch.distributed import ReduceOp

    bound = _Bound(
        pg=process_group(comm),
        rank=comm.Get_rank(),
        size=comm.Get_size(),
        from_numpy=torch.from_numpy,
        ops={name: getattr(ReduceOp, member) for name, member in GLOO_OPS.items()},
        scratch=Scratch(),
    )
    return make_call(bound)


_SUMMARY = "torch.distributed Gloo (TCP; loopback on one host)"
_REDUCING = (CPU_BUFFERS, GLOO_DTYPE, GLOO_OP)
_MOVING = (CPU_BUFFERS,)
# Every collective Gloo has, with its call maker and requirements.
_COLLECTIVES: dict[str, tuple[Callable[[_Bound], Callable], tuple[Requirement, ...]]] = {
    "allreduce": (_allreduce, _REDUCING),
    "bcast": (_bcast, _MOVING),
    "reduce": (_reduce, _REDUCING),
    "allgather": (_allgather, _MOVING),
    "reduce_scatter": (_reduce_scatter, _REDUCING),
    "alltoall": (_alltoall, _MOVING),
    "gather": (_gather, _MOVING),
    "scatter": (_scatter, _MOVING),
    "barrier": (_barrier, _MOVING),
}


def register_backend() -> None:
    """Register 'gloo' for every collective if torch is installed, else say why not."""
    reason = unavailable_reason()
    if reason:
        UNAVAILABLE_BACKENDS[BACKEND] = reason
        return
    for collective, (make_call, requires) in _COLLECTIVES.items():
        factory = functools.partial(_bind, make_call)
        register(collective, "gloo", backend=BACKEND, summary=_SUMMARY, requires=requires)(factory)


register_backend()
