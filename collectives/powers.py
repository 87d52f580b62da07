"""Powers of two, as the algorithms' preconditions and MPICH's selection trees test process
counts; a leaf module (no imports), so the MPICH layer model, which the device layer
imports, can use it without importing the buffer helpers (collectives.common)."""

from __future__ import annotations


def is_power_of_two(p: int) -> bool:
    """True for 1, 2, 4, 8, ..."""
    return p > 0 and p & (p - 1) == 0


def largest_power_of_two_at_most(p: int) -> int:
    """The largest power of two <= p (p >= 1)."""
    return 1 << (p.bit_length() - 1)
