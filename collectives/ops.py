"""Reduction operations: the MPI op, the numpy ufunc that applies it, and its constraints."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from collectives.dtypes import ElementType
from collectives.errors import UsageError


@dataclass(frozen=True)
class ReduceOp:
    """A reduction: what MPI calls it and how our own algorithms apply it in place."""

    name: str
    mpi: MPI.Op
    ufunc: np.ufunc
    commutative: bool = True
    integer_only: bool = False

    def check_dtype(self, etype: ElementType) -> None:
        """Raise UsageError if this op is not defined for the element type."""
        if self.integer_only and not etype.is_integer:
            raise UsageError(
                f"op {self.name!r} is not valid for {etype.name}: needs an integer type"
            )


REDUCE_OPS: dict[str, ReduceOp] = {
    op.name: op
    for op in (
        ReduceOp("sum", MPI.SUM, np.add),
        ReduceOp("prod", MPI.PROD, np.multiply),
        ReduceOp("max", MPI.MAX, np.maximum),
        ReduceOp("min", MPI.MIN, np.minimum),
        ReduceOp("band", MPI.BAND, np.bitwise_and, integer_only=True),
        ReduceOp("bor", MPI.BOR, np.bitwise_or, integer_only=True),
        ReduceOp("bxor", MPI.BXOR, np.bitwise_xor, integer_only=True),
    )
}


def reduce_op(name: str) -> ReduceOp:
    """Look up a reduction by name."""
    if name not in REDUCE_OPS:
        raise UsageError(f"unknown op {name!r}: expected one of {', '.join(REDUCE_OPS)}")
    return REDUCE_OPS[name]
