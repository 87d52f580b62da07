"""measurement.memory: the bytes a rank holds for one call, counted before anything is
allocated, against what the kernel then takes (traced): a lower bound, and close to the
peak of filling, computing the expected result and checking it; on cuda, the pinned host
memory of the staged calls (their send block and receive mirrors), which the check counts
for bench and the sweep."""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI

from collectives import specs
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.specs import SPECS
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement import kernel, memory
from osu_dl_bench.measurement.kernel import count_wrong, prepare_inputs
from osu_dl_bench.measurement.memory import (
    available_bytes,
    check_node_memory,
    collective_need,
    point_to_point_need,
)


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
    # On cuda: the pinned send block and receive mirror, each rounded as cupy's pool does.
    assert collective_need(allreduce, 1000, 2, 4, "cuda").rank_bytes == 2 * 4096
    rotated = collective_need(SPECS["bcast"], 1000, 4, 4, "cpu", roots=4)
    assert rotated.rank_bytes == (2 * 1 * 2 + 1) * 4000  # a second layout beside the first
    assert point_to_point_need("bw", 1 << 20).rank_bytes == 2 << 20


def test_available_memory_is_positive_and_at_most_physical():
    from osu_dl_bench.measurement.bench_config import host_memory_bytes

    assert 0 < available_bytes() <= host_memory_bytes()


MIB = 1 << 20


def test_staged_calls_hold_the_send_block_and_each_their_receive_mirrors():
    allreduce, counts = SPECS["allreduce"], [MIB // 4 * 2**k for k in range(4)]  # 1-8 MiB
    need = collective_need(allreduce, counts[-1], 2, 4, "cuda", staged_calls=3, counts=counts)
    # One send block of the largest size; per call, a mirror per size: 1+2+4+8 MiB.
    assert need.rank_bytes == 8 * MIB + 3 * 15 * MIB
    assert "3 staged calls' receive mirrors" in need.parts
    alone = collective_need(allreduce, counts[-1], 2, 4, "cuda")  # one call, one size
    assert alone.rank_bytes == 2 * 8 * MIB
    assert collective_need(allreduce, counts[-1], 2, 4, "cuda", staged_calls=0).rank_bytes == 0


def test_the_receive_mirrors_of_a_call_stay_within_their_limit(monkeypatch):
    from collectives import device

    monkeypatch.setattr(device, "RECV_MIRROR_BYTES", 4 * MIB)
    counts = [MIB // 4 * 2**k for k in range(4)]
    need = collective_need(
        SPECS["allreduce"], counts[-1], 2, 4, "cuda", staged_calls=2, counts=counts
    )
    assert need.rank_bytes == 8 * MIB + 2 * 8 * MIB  # the largest alone passes the limit


def test_the_check_refuses_buffers_that_fit_only_without_their_mirrors(cupy, monkeypatch):
    allreduce, counts = SPECS["allreduce"], [MIB // 4 * 2**k for k in range(4)]
    monkeypatch.setattr(memory, "available_bytes", lambda: 40 * MIB)
    check_node_memory(MPI.COMM_SELF, [collective_need(allreduce, counts[-1], 2, 4, "cuda")])
    staged = collective_need(allreduce, counts[-1], 2, 4, "cuda", staged_calls=3, counts=counts)
    with pytest.raises(UsageError, match="3 staged calls' receive mirrors"):
        check_node_memory(MPI.COMM_SELF, [staged])


def test_bench_counts_every_staged_candidate_and_the_staging_bound(monkeypatch):
    from collectives.dtypes import element_type as etype_of
    from osu_dl_bench.cli import build_parser
    from osu_dl_bench.commands import bench
    from osu_dl_bench.commands.bench_cli import config_from_args
    from osu_dl_bench.jobs.plan import variants_for
    from osu_dl_bench.measurement.harness import Setting

    monkeypatch.setenv("OSU_DL_BENCH_CUDA_AWARE", "0")  # MPI stages
    argv = ["bench", "allreduce", "-d", "cuda", "-m", "1M:8M", "--bounds"]
    cfg = config_from_args(build_parser().parse_args(argv))
    setting = Setting(SPECS["allreduce"], etype_of("float32"), reduce_op("sum"), np)
    nccl = SimpleNamespace(algorithm=SimpleNamespace(backend="nccl"))  # takes device memory
    variants = [*variants_for("allreduce", ["native", "ring:seg=0"]), nccl]
    need = bench._memory_need(cfg, setting, 2, variants)
    # native and ring stage, nccl does not; the staging bound is one more staged call.
    assert need.rank_bytes == 8 * MIB + 3 * 15 * MIB


def test_a_sweep_counts_the_candidates_one_isolation_group_stages_at_a_point(monkeypatch):
    from osu_dl_bench.jobs import worker
    from osu_dl_bench.jobs.plan import variants_for

    monkeypatch.setenv("OSU_DL_BENCH_CUDA_AWARE", "0")  # MPI stages
    variants = variants_for("allreduce", ["native", "ring:seg=0", "ring:seg=256K", "gloo"])
    # The MPI group's three; the gloo group's launches measure gloo beside native.
    assert worker._staged_per_point("cuda", variants) == 3
    assert worker._staged_per_point("cpu", variants) == 0


def test_pinned_memory_is_counted_as_cupys_pool_rounds_it(cupy):
    from collectives import device

    # cupy/cuda/pinned_memory.pyx: up to a multiple of 512 bytes, then a power of two.
    assert device.pinned_bytes(0) == 0
    assert device.pinned_bytes(1) == 512
    assert device.pinned_bytes(27_500_000) == 32 * MIB  # a 27.5 MB gradient bucket
    allreduce, n = SPECS["allreduce"], 27_500_000 // 4
    need = collective_need(allreduce, n, 2, 4, "cuda")
    assert need.rank_bytes == 2 * 32 * MIB  # the send block and the receive mirror
    # What the strict pool holds after a staged call of that size is what was counted.
    import cupyx

    before = cupyx.pinned_held()
    send, recv = cupy.zeros(n, np.float32), cupy.zeros(n, np.float32)
    call = device.staged(lambda *args: None)  # keeps its receive mirror while alive
    call(send, recv, None, 0)
    assert cupyx.pinned_held() - before <= need.rank_bytes
    assert cupyx.pinned_held() - before > 2 * n * 4  # the exact sizes would under-count


def test_a_need_larger_than_the_gpus_free_memory_is_refused_with_the_figures(cupy, monkeypatch):
    from collectives import device

    monkeypatch.setenv("STRICT_CUPY_DEVICE_MEMORY", str(64 * MIB))
    monkeypatch.setattr(device, "_selected", {"index": 0})
    need = collective_need(SPECS["allreduce"], 8 * MIB, 2, 4, "cuda")  # 32 MiB messages
    assert need.device_bytes == 4 * 32 * MIB  # send, recv and their pristine copies
    with pytest.raises(UsageError) as refused:
        check_node_memory(MPI.COMM_SELF, [need])
    message = str(refused.value)
    assert "0.1 GiB of device memory" in message and "of the 0.1 GiB of GPU 0" in message
    assert "pristine copies" in message
    assert cupy.device_bytes_held() == 0  # refused before anything was allocated
    small = collective_need(SPECS["allreduce"], MIB, 2, 4, "cuda")  # 4 MiB messages
    check_node_memory(MPI.COMM_SELF, [small])
