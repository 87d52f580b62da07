"""``native``: the MPI library's own implementation of each collective.

The per-call functions are kept as thin as possible (one Python call around the mpi4py
call) because at 8 B the harness's overhead is what a user would see as latency: MPI
objects they need are read once, at bind time, which also loads MPI through
collectives.mpi and with it the reduction ops' MPI.Op (``ReduceOp.mpi``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collectives import mpi
from collectives.registry import register

if TYPE_CHECKING:
    from mpi4py import MPI

_SUMMARY = "the MPI library's own algorithm selection"


@register("allreduce", "native", summary=_SUMMARY)
def allreduce(comm: MPI.Comm):
    """Bind MPI_Allreduce."""
    in_place = mpi.IN_PLACE

    def call(send, recv, op, root):
        comm.Allreduce(in_place if send is None else send, recv, op.mpi)

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
    in_place = mpi.IN_PLACE

    def call(send, recv, op, root):
        comm.Reduce(in_place if send is None else send, recv, op.mpi, root)

    return call


@register("allgather", "native", summary=_SUMMARY)
def allgather(comm: MPI.Comm):
    """Bind MPI_Allgather."""
    in_place = mpi.IN_PLACE

    def call(send, recv, op, root):
        comm.Allgather(in_place if send is None else send, recv)

    return call


@register("reduce_scatter", "native", summary=_SUMMARY)
def reduce_scatter(comm: MPI.Comm):
    """Bind MPI_Reduce_scatter_block."""
    in_place = mpi.IN_PLACE

    def call(send, recv, op, root):
        comm.Reduce_scatter_block(in_place if send is None else send, recv, op.mpi)

    return call


@register("alltoall", "native", summary=_SUMMARY)
def alltoall(comm: MPI.Comm):
    """Bind MPI_Alltoall."""
    in_place = mpi.IN_PLACE

    def call(send, recv, op, root):
        comm.Alltoall(in_place if send is None else send, recv)

    return call


@register("gather", "native", summary=_SUMMARY)
def gather(comm: MPI.Comm):
    """Bind MPI_Gather."""
    in_place = mpi.IN_PLACE

    def call(send, recv, op, root):
        comm.Gather(in_place if send is None else send, recv, root)

    return call


@register("scatter", "native", summary=_SUMMARY)
def scatter(comm: MPI.Comm):
    """Bind MPI_Scatter."""
    in_place = mpi.IN_PLACE

    def call(send, recv, op, root):
        comm.Scatter(send, in_place if recv is None else recv, root)

    return call


@register("barrier", "native", summary=_SUMMARY)
def barrier(comm: MPI.Comm):
    """Bind MPI_Barrier."""

    def call(send, recv, op, root):
        comm.Barrier()

    return call
