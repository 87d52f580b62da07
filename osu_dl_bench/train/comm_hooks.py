"""Gradient reductions with one signature, ``reduce(buffer)``: in place, the buffer
becomes the mean over ranks. Wrappers compose, as PyTorch's DDP communication hooks do
(torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py): ``fp16_compress`` wraps
any reduction.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from osu_dl_bench.collectives.ops import reduce_op
from osu_dl_bench.collectives.registry import CollectiveCall

GradReduce = Callable[[np.ndarray], None]


def mean_allreduce(call: CollectiveCall, nprocs: int) -> GradReduce:
    """Average over ranks with an in-place sum allreduce ``call`` (any registry algorithm)."""
    op = reduce_op("sum")

    def reduce(buffer: np.ndarray) -> None:
        # Divide first, as DDP's allreduce_hook does: p fp16 gradients may overflow when
        # summed where their mean would not.
        if nprocs > 1:
            np.divide(buffer, nprocs, out=buffer)
        call(None, buffer, op, 0)

    return reduce


def fp16_compress(inner: GradReduce, scratch: np.ndarray) -> GradReduce:
    """Run ``inner`` on a float16 copy (half the bytes on the wire), then copy back.

    ``scratch`` is a float16 array of the buffer's length, allocated once per bucket so a
    step allocates nothing.
    """

    def reduce(buffer: np.ndarray) -> None:
        np.copyto(scratch, buffer, casting="same_kind")
        inner(scratch)
        np.copyto(buffer, scratch)

    return reduce
