"""cupyx of the strict stand-in: pinned host arrays (plain numpy here)."""

import numpy as np


def empty_pinned(shape, dtype=float, order="C"):
    return np.empty(shape, dtype, order=order)


def zeros_pinned(shape, dtype=float, order="C"):
    return np.zeros(shape, dtype, order=order)
