"""measurement.memory: the bytes a rank holds for one call, counted before anything is
allocated, against what the kernel then takes (traced): a lower bound, and close to the
peak of filling, computing the expected result and checking it."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from collectives import specs
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.specs import SPECS
from osu_dl_bench.measurement import kernel
from osu_dl_bench.measurement.kernel import count_wrong, prepare_inputs
from osu_dl_bench.measurement.memory import available_bytes, collective_need, point_to_point_need


class _Comm:
    """The rank and size prepare_inputs reads, without MPI."""

    def __init__(self, size: int) -> None:
        self.size = size

    def Get_size(self) -> int:
        return self.size

    def Get_rank(self) -> int:
        return 0


def _traced(spec, n, p, etype, checked):
    """(bytes held at the end, peak) of preparing a point and, if checked, checking it."""
    op = reduce_op("sum") if spec.reduces else None
    tracemalloc.start()
    try:
        inputs = prepare_inputs(_Comm(p), spec, etype, op, np, n, checked=checked)
        if checked:
            expected = inputs.expected()
            output = spec.output(inputs.bufs, inputs.shape)
            if output is not None:
                count_wrong(output, expected, etype)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held, peak


CHUNK = 1024  # elements: the chunked temporaries stay small beside the buffers
OBJECTS = 64 * 1024  # bytes of Python objects around the arrays


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("collective", [c for c in SPECS if c != "barrier"])
def test_the_count_is_the_traced_peak_up_to_the_chunked_temporaries(monkeypatch, collective, dtype):
    monkeypatch.setattr(specs, "INPUT_CHUNK", CHUNK)
    monkeypatch.setattr(kernel, "INPUT_CHUNK", CHUNK)
    spec, n, p = SPECS[collective], 256 * CHUNK, 4
    etype = element_type(dtype)
    for checked in (True, False):
        held, peak = _traced(spec, n, p, etype, checked)
        counted = collective_need(spec, n, p, etype.itemsize, "cpu", checked).rank_bytes
        # What the count leaves out: a few int64 and float64 chunks, the bool mask, and
        # the arrays' own Python objects.
        slack = 6 * 8 * CHUNK + n * p + OBJECTS
        assert held <= counted + OBJECTS, (checked, counted, held)
        assert counted <= peak <= counted + slack, (checked, counted, peak)


def test_the_count_names_its_parts():
    allreduce = SPECS["allreduce"]
    # allreduce: send + recv, their copies, the expected result; unchecked: the inputs
    # being built beside the buffers
    assert collective_need(allreduce, 1000, 2, 4, "cpu").rank_bytes == 5 * 4000
    assert collective_need(allreduce, 1000, 2, 4, "cpu", checked=False).rank_bytes == 3 * 4000
    assert collective_need(SPECS["allgather"], 1000, 4, 4, "cpu").rank_bytes == 14 * 4000
    assert collective_need(allreduce, 1000, 2, 4, "cuda").rank_bytes == 2 * 4000
    rotated = collective_need(SPECS["bcast"], 1000, 4, 4, "cpu", roots=4)
    assert rotated.rank_bytes == (2 * 1 * 2 + 1) * 4000  # a second layout beside the first
    assert point_to_point_need("bw", 1 << 20).rank_bytes == 2 << 20


def test_available_memory_is_positive_and_at_most_physical():
    from osu_dl_bench.measurement.options import host_memory_bytes

    assert 0 < available_bytes() <= host_memory_bytes()
