"""measurement.memory: the bytes a rank holds for one call, counted before anything is
allocated, are a lower bound of what the kernel's buffers then take (traced)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.specs import SPECS, CallShape
from osu_dl_bench.measurement.kernel import prepare_inputs
from osu_dl_bench.measurement.memory import available_bytes, rank_bytes


class _Comm:
    """The rank and size prepare_inputs reads, without MPI."""

    def __init__(self, size: int) -> None:
        self.size = size

    def Get_size(self) -> int:
        return self.size

    def Get_rank(self) -> int:
        return 0


@pytest.mark.parametrize("collective", [c for c in SPECS if c != "barrier"])
def test_the_count_is_a_lower_bound_of_the_traced_buffers(collective):
    spec, n, p = SPECS[collective], 1 << 16, 4
    etype = element_type("float32")
    op = reduce_op("sum") if spec.reduces else None
    tracemalloc.start()
    try:
        inputs = prepare_inputs(_Comm(p), spec, etype, op, np, n)
        expected = inputs.expected()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    counted = rank_bytes(spec, n, p, etype.itemsize, "cpu")
    assert 0 < counted <= held, (counted, held)
    assert expected.nbytes == spec.recv_count(CallShape(n, p, 0, 0, False)) * 4


def test_allreduce_counts_its_buffers_their_copies_and_the_expected_result():
    assert rank_bytes(SPECS["allreduce"], 1000, 2, 4, "cpu") == 5 * 4000
    assert rank_bytes(SPECS["allgather"], 1000, 4, 4, "cpu") == (2 * 5 + 4) * 4000
    assert rank_bytes(SPECS["allreduce"], 1000, 2, 4, "cuda") == 2 * 4000  # host mirrors


def test_available_memory_is_positive_and_at_most_physical():
    from osu_dl_bench.measurement.options import host_memory_bytes

    assert 0 < available_bytes() <= host_memory_bytes()
