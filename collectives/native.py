"""``native``: the MPI library's own implementation of each collective.

The per-call functions are kept as thin as possible (one Python call around the mpi4py
call) because at 8 B the harness's overhead is what a user would see as latency.
"""

from __future__ import annotations

from typing import Any

from mpi4py import MPI

from collectives.registry import register

_SUMMARY = "the MPI library's own algorithm selection"


def _in_place(buf: Any) -> Any:
    return MPI.IN_PLACE if buf is None else buf


@register("allreduce", "native", summary=_SUMMARY)
def allreduce(comm: MPI.Comm):
    """Bind MPI_Allreduce."""

    def call(send, recv, op, root):
        comm.Allreduce(MPI.IN_PLACE if send is None else send, recv, op.mpi)

    return call


@register("bcast", "native", summary=_SUMMARY)
def bcast(comm: MPI.Comm):
    """Bind MPI_Bcast."""

    def call(send, recv, op, root):
        comm.Bcast(recv, root)

    return call


@register("reduce", "native", summary=_SUMMARY)
def reduce(comm: MPI.Comm):
    """Bind MPI_Reduce."""

    def call(send, recv, op, root):
        comm.Reduce(_in_place(send), recv, op.mpi, root)

    return call


@register("allgather", "native", summary=_SUMMARY)
def allgather(comm: MPI.Comm):
    """Bind MPI_Allgather."""

    def call(send, recv, op, root):
        comm.Allgather(_in_place(send), recv)

    return call


@register("reduce_scatter", "native", summary=_SUMMARY)
def reduce_scatter(comm: MPI.Comm):
    """Bind MPI_Reduce_scatter_block."""

    def call(send, recv, op, root):
        comm.Reduce_scatter_block(_in_place(send), recv, op.mpi)

    return call


@register("alltoall", "native", summary=_SUMMARY)
def alltoall(comm: MPI.Comm):
    """Bind MPI_Alltoall."""

    def call(send, recv, op, root):
        comm.Alltoall(_in_place(send), recv)

    return call


@register("gather", "native", summary=_SUMMARY)
def gather(comm: MPI.Comm):
    """Bind MPI_Gather."""

    def call(send, recv, op, root):
        comm.Gather(_in_place(send), recv, root)

    return call


@register("scatter", "native", summary=_SUMMARY)
def scatter(comm: MPI.Comm):
    """Bind MPI_Scatter."""

    def call(send, recv, op, root):
        comm.Scatter(send, _in_place(recv), root)

    return call


@register("barrier", "native", summary=_SUMMARY)
def barrier(comm: MPI.Comm):
    """Bind MPI_Barrier."""

    def call(send, recv, op, root):
        comm.Barrier()

    return call
