"""Reduction operations: the MPI op, the numpy ufunc that applies it, and its constraints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives import mpi as lazy_mpi
from collectives.dtypes import ElementType
from collectives.errors import UsageError

if TYPE_CHECKING:
    from mpi4py import MPI


@dataclass(frozen=True)
class ReduceOp:
    """A reduction: what MPI calls it and how our own algorithms apply it in place."""

    name: str
    # The op's name in mpi4py.MPI ("SUM"): MPI objects exist only once MPI is loaded.
    mpi_name: str
    ufunc: np.ufunc
    commutative: bool = True
    integer_only: bool = False
    # The MPI op, set when MPI is loaded through collectives.mpi (binding a native
    # algorithm does that). A plain instance attribute, no property: the native calls read
    # it on every call, and CPython specialises reads of plain attributes only.
    mpi: MPI.Op = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lazy_mpi.when_loaded(self._set_mpi_op)

    def _set_mpi_op(self, loaded_mpi: Any) -> None:
        object.__setattr__(self, "mpi", getattr(loaded_mpi, self.mpi_name))

    def check_dtype(self, etype: ElementType) -> None:
        """Raise UsageError if this op is not defined for the element type."""
        if self.integer_only and not etype.is_integer:
            raise UsageError(
                f"op {self.name!r} is not valid for {etype.name}: needs an integer type"
            )


REDUCE_OPS: dict[str, ReduceOp] = {
    op.name: op
    for op in (
        ReduceOp("sum", "SUM", np.add),
        ReduceOp("prod", "PROD", np.multiply),
        ReduceOp("max", "MAX", np.maximum),
        ReduceOp("min", "MIN", np.minimum),
        ReduceOp("band", "BAND", np.bitwise_and, integer_only=True),
        ReduceOp("bor", "BOR", np.bitwise_or, integer_only=True),
        ReduceOp("bxor", "BXOR", np.bitwise_xor, integer_only=True),
    )
}


def reduce_op(name: str) -> ReduceOp:
    """Look up a reduction by name."""
    if name not in REDUCE_OPS:
        raise UsageError(f"unknown op {name!r}: expected one of {', '.join(REDUCE_OPS)}")
    return REDUCE_OPS[name]
