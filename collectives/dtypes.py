"""Element types the benchmarks accept, their MPI names and validation tolerances."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectives.errors import UsageError


@dataclass(frozen=True)
class ElementType:
    """A benchmarkable element type."""

    name: str
    dtype: np.dtype
    mpi_name: str
    # Relative tolerance when comparing with the expected result: reduction order differs
    # between algorithms, so floats may round differently; integers must match exactly.
    rtol: float

    @property
    def is_integer(self) -> bool:
        """True for integer types (exact comparison, bitwise ops allowed)."""
        return self.dtype.kind in "iu"

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize


_TYPES = [
    ElementType("float16", np.dtype(np.float16), "MPIX_C_FLOAT16", 1e-2),
    ElementType("float32", np.dtype(np.float32), "MPI_FLOAT", 1e-5),
    ElementType("float64", np.dtype(np.float64), "MPI_DOUBLE", 1e-12),
    ElementType("int8", np.dtype(np.int8), "MPI_SIGNED_CHAR", 0.0),
    ElementType("uint8", np.dtype(np.uint8), "MPI_UNSIGNED_CHAR", 0.0),
    ElementType("int16", np.dtype(np.int16), "MPI_SHORT", 0.0),
    ElementType("int32", np.dtype(np.int32), "MPI_INT", 0.0),
    ElementType("int64", np.dtype(np.int64), "MPI_INT64_T", 0.0),
    ElementType("uint32", np.dtype(np.uint32), "MPI_UNSIGNED", 0.0),
    ElementType("uint64", np.dtype(np.uint64), "MPI_UINT64_T", 0.0),
]
ELEMENT_TYPES: dict[str, ElementType] = {t.name: t for t in _TYPES}
# OSU users type MPI names (-T mpi_float); accept those too.
_ALIASES = {t.mpi_name.lower(): t.name for t in _TYPES} | {
    "mpi_char": "int8",
    "mpi_long": "int64",
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "int": "int32",
}


def element_type(name: str) -> ElementType:
    """Look up an element type by numpy or MPI name."""
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in ELEMENT_TYPES:
        raise UsageError(f"unknown datatype {name!r}: expected one of {', '.join(ELEMENT_TYPES)}")
    return ELEMENT_TYPES[key]
