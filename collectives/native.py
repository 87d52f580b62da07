"""``native``: the MPI library's own implementation of each collective.

The per-call functions are kept as thin as possible (one Python call around the mpi4py
call) because at 8 B the harness's overhead is what a user would see as latency: MPI
objects they need are read once, at bind time, which also loads MPI through
collectives.mpi and with it the reduction ops' MPI.Op (``ReduceOp.mpi``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from collectives import mpi, mpit
from collectives.errors import UsageError
from collectives.registry import Algorithm, Variant, register

if TYPE_CHECKING:
    from mpi4py import MPI

_SUMMARY = "the MPI library's own algorithm selection"
# An ``alg`` value names a library algorithm ('ring', 'posix_mpir', 'all' in a sweep): it
# goes into an isolation group's name and an environment variable's value.
_ALG_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclasses.dataclass(frozen=True)
class NativeAlgorithm(Algorithm):
    """``native`` of a collective whose library algorithms can be forced: the parameter
    ``alg`` ('auto', the library's own choice, by default) names one of them. The default
    variant keeps the plain label 'native' (no parameter shown), as every table and run
    directory spells the library's own selection."""

    def variant(self, **params: int | str) -> Variant:
        """``native`` for alg=auto, else ``native:alg=NAME``."""
        bound = super().variant(**params)
        if bound.params.get("alg") == mpit.AUTO:
            return Variant(self, MappingProxyType({}))
        return bound


def _check_alg(params: Mapping[str, int | str]) -> None:
    alg = str(params.get("alg", mpit.AUTO))
    if not _ALG_NAME.fullmatch(alg):
        raise UsageError(
            f"native:alg={alg}: expected a library algorithm's name (lowercase letters, "
            "digits, '_'), as `osu-dl-bench list` shows them"
        )


def check_forced(collective: str, alg: str) -> None:
    """Raise a UsageError unless this launch's library runs ``alg`` for ``collective``
    (the variable that forces it was set at launch), naming the variable to set."""
    if alg == "all":
        raise UsageError(
            "native:alg=all expands only in a sweep (each library algorithm needs a launch "
            "of its own); here name one, e.g. native:alg=ring (see osu-dl-bench list)"
        )
    problem = mpit.forcing_problem(collective, alg)
    if problem is not None:
        raise UsageError(problem)


# The collectives whose library algorithms can be forced: native takes ``alg`` there.
_FORCIBLE = {
    "algorithm_class": NativeAlgorithm,
    "check_params": _check_alg,
}


@register("allreduce", "native", summary=_SUMMARY, **_FORCIBLE)
def allreduce(comm: MPI.Comm, alg: str = mpit.AUTO):
    """Bind MPI_Allreduce (``alg``: the library algorithm this launch forces)."""
    if alg != mpit.AUTO:
        check_forced("allreduce", alg)
    in_place = mpi.IN_PLACE

    def call(send, recv, op, root):
        comm.Allreduce(in_place if send is None else send, recv, op.mpi)

    return call


@register("bcast", "native", summary=_SUMMARY, **_FORCIBLE)
def bcast(comm: MPI.Comm, alg: str = mpit.AUTO):
    """Bind MPI_Bcast (``alg``: the library algorithm this launch forces)."""
    if alg != mpit.AUTO:
        check_forced("bcast", alg)

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
