"""The GPU path on the strict cupy stand-in (tests/support/strict_cupy), in one process:
buffers filled with ``set``, kernels finished before MPI meets their memory, timed regions
that wait for the device, host staging, and the GPU choice. Multi-rank runs of the same
paths are in tests/mpi/test_gpu_paths.py."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from mpi4py import MPI
from support.interpreter import run_python
from support.strict import STRICT_CUPY

from collectives import SPECS, Buffers, CallShape, device
from collectives.common import copy_into, reduce_into, start_in_place
from collectives.ops import reduce_op


def _pending(cupy) -> bool:
    return bool(cupy._pending)


def test_the_stand_in_is_strict_like_cupy(cupy):
    values = np.arange(4, dtype=np.float32)
    array = cupy.zeros(4, np.float32)
    assert not isinstance(array, np.ndarray)
    with pytest.raises(TypeError):
        type(array)(values)  # cupy.ndarray's constructor takes a shape
    with pytest.raises(TypeError):
        np.asarray(array)
    with pytest.raises(TypeError):
        array[...] = values  # host memory is no kernel operand


def test_mpi_is_refused_memory_a_kernel_has_not_finished(cupy):
    send, recv = cupy.zeros(3, np.int32), cupy.zeros(3, np.int32)
    send.set(np.array([1, 2, 3], np.int32))
    with pytest.raises(TypeError):  # mpi4py reports the refused buffer as a TypeError
        MPI.COMM_SELF.Sendrecv(send, 0, 0, recv, 0, 0)
    assert cupy.violations
    device.device_ready(send)
    MPI.COMM_SELF.Sendrecv(send, 0, 0, recv, 0, 0)
    assert recv.get().tolist() == [1, 2, 3]


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("in_place", [False, True])
def test_fill_writes_cupy_buffers_with_set_and_leaves_them_ready(cupy, name, in_place):
    spec, op = SPECS[name], reduce_op("sum") if SPECS[name].reduces else None
    shape = CallShape(n=5, nprocs=3, rank=1, root=1, in_place=in_place)
    on_gpu, on_host = spec.allocate(cupy, np.dtype(np.float32), shape), None
    on_host = spec.allocate(np, np.dtype(np.float32), shape)
    spec.fill(on_gpu, shape, op)
    spec.fill(on_host, shape, op)
    assert not _pending(cupy)
    for gpu, host in ((on_gpu.send, on_host.send), (on_gpu.recv, on_host.recv)):
        assert (gpu is None) == (host is None)
        if gpu is not None:
            np.testing.assert_array_equal(gpu.get(), host)


def test_local_operations_finish_before_returning(cupy):
    target, other = cupy.zeros(4, np.float32), cupy.zeros(4, np.float32)
    device.device_ready(target)
    reduce_into(reduce_op("sum"), target, other)
    assert not _pending(cupy)
    copy_into(target[:2], other[2:])
    assert not _pending(cupy)
    start_in_place(other, target)
    assert not _pending(cupy)


def test_device_ready_and_settle_leave_host_arrays_alone():
    assert "cupy" not in sys.modules or not device.is_device_array(np.zeros(1))
    device.device_ready(np.zeros(2), None)
    assert device.settle_for(np.zeros(2), None)() is None


def test_timed_calls_stop_the_clock_after_the_device_is_idle(cupy):
    from osu_dl_bench.measurement.kernel import timed_round

    recv = cupy.zeros(4, np.float32)
    device.device_ready(recv)

    def kernel_only(send, recv, op, root):
        np.add(recv, recv, out=recv)  # queued; the timed region must wait for it

    times = np.zeros((1, 2))
    timed_round(lambda: None, [kernel_only], [0], Buffers(None, recv), None, [0, 0], times)
    assert not _pending(cupy)


def test_staging_runs_the_call_on_host_copies_and_copies_the_result_back(cupy):
    send, recv = cupy.zeros(3, np.int64), cupy.zeros(3, np.int64)
    send.set(np.array([1, 2, 3]))
    seen = []

    def host_only(send, recv, op, root):
        seen.append((type(send), type(recv)))
        recv[...] = send * 10

    device.staged(host_only)(send, recv, None, 0)
    assert seen == [(np.ndarray, np.ndarray)]
    assert recv.get().tolist() == [10, 20, 30]
    assert not _pending(cupy)


def test_cuda_awareness_can_be_stated_and_decides_staging(monkeypatch):
    monkeypatch.setenv(device.CUDA_AWARE_ENV, "0")
    assert not device.cuda_aware()
    assert device.needs_staging("cuda", "mpi") and not device.needs_staging("cuda", "nccl")
    assert not device.needs_staging("cuda", "selector")  # it stages per algorithm it binds
    assert not device.needs_staging("cpu", "mpi")
    monkeypatch.setenv(device.CUDA_AWARE_ENV, "1")
    assert device.cuda_aware() and not device.needs_staging("cuda", "mpi")
    call = object()
    assert device.for_backend(call, "mpi", "cuda") is call


def test_ranks_sharing_a_gpu_are_found_by_uuid_not_by_count():
    assert device.shared_gpu_reason(["a", "b", "c"]) is None
    reason = device.shared_gpu_reason(["a", "b", "a"])
    assert "ranks 0 and 2" in reason and "a" in reason


def test_one_visible_gpu_per_rank_is_not_sharing(cupy, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")  # as --gpus-per-task=1 leaves it
    assert device.select_local_gpu(MPI.COMM_SELF) == 0
    assert device.selected_gpu() == 0 and device.gpu_sharing_reason() is None


def test_importing_the_packages_initialises_no_cuda(tmp_path):
    code = (
        "import cupy, osu_dl_bench.cli, collectives, collectives.device, collectives.specs,"
        " osu_dl_bench.measurement.kernel, osu_dl_bench.measurement.harness;"
        "assert not cupy.cuda.runtime.initialised"
    )
    env = {"PYTHONPATH": str(STRICT_CUPY), "PATH": "/usr/bin:/bin"}
    run_python(code, env=env)


def _cuda_table(*spans):
    import dataclasses

    from support.tuning import make_entry, make_table

    entry = make_entry(1, list(spans))
    return make_table(dataclasses.replace(entry, key=dataclasses.replace(entry.key, device="cuda")))


@pytest.mark.usefixtures("registered")
def test_tuned_stages_its_mpi_choices_where_mpi_is_not_cuda_aware(plain_mpi):
    from collectives import CallContext, lookup
    from collectives.dtypes import element_type
    from osu_dl_bench.selection import Selector

    sel = Selector(_cuda_table((0, "native"), (1024, "native")), force={})
    ctx = CallContext(1, element_type("float32"), reduce_op("sum"), "cuda", 1, 1)
    call = sel.bind(MPI.COMM_SELF, "allreduce", ctx)
    native = lookup("allreduce", "native").variant()
    assert call is not sel.calls.get(MPI.COMM_SELF, native)  # staged
    # One algorithm at every size stays one call: no per-size lookup is put in front.
    assert call is sel.bind_variant(MPI.COMM_SELF, native, ctx)
    for n in (1, 2048):
        send, recv = plain_mpi.asarray(np.ones(n, np.float32)), plain_mpi.zeros(n, np.float32)
        call(send, recv, reduce_op("sum"), 0)
        assert (recv.get() == 1).all()
    host = CallContext(1, element_type("float32"), reduce_op("sum"), "cpu", 1, 1)
    assert sel.bind(MPI.COMM_SELF, "allreduce", host) is sel.calls.get(MPI.COMM_SELF, native)


@pytest.mark.parametrize("dev", ["cuda", "cpu"])
def test_the_sweep_chooses_the_gpu_over_the_whole_job_first(cupy, monkeypatch, tmp_path, dev):
    from support.sweep import sweep_config

    from osu_dl_bench.jobs import worker

    chosen = []
    monkeypatch.setattr(worker, "select_local_gpu", chosen.append)
    monkeypatch.setattr(worker, "_open_run_dir", lambda *args: set())
    monkeypatch.setattr(worker, "_sweep_counts", lambda *args: 0)
    cfg = sweep_config("--inside", "--np", "1", "-d", dev, "-o", str(tmp_path / "run"))
    assert worker.run_inside(MPI.COMM_WORLD, cfg) == 0
    # Later points may run on sub-communicators, whose node-local ranks are not the job's.
    assert chosen == ([MPI.COMM_WORLD] if dev == "cuda" else [])


@pytest.fixture
def copies(cupy, monkeypatch) -> dict[str, int]:
    """How many device-to-host (get) and host-to-device (set) copies ran."""
    counts = {"get": 0, "set": 0}
    for name in counts:
        real = getattr(cupy.ndarray, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            counts[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(cupy.ndarray, name, counted)
    return counts


def _noop(send, recv, op, root):
    return None


def test_staging_copies_recv_in_only_where_the_call_reads_it(cupy, copies):
    send, recv = cupy.zeros(3, np.int64), cupy.zeros(3, np.int64)
    device.staged(_noop)(send, recv, None, 0)
    assert copies == {"get": 1, "set": 1}  # recv is only overwritten: not copied in
    device.staged(_noop)(None, recv, None, 0)
    assert copies == {"get": 2, "set": 2}  # in place: recv is read, so copied in


@pytest.mark.parametrize(
    "benchmark,rank,expected", [("bw", 0, (64, 0)), ("bw", 1, (0, 64)), ("latency", 0, (1, 1))]
)
def test_each_staged_point_to_point_message_pays_its_own_copy(
    cupy, copies, benchmark, rank, expected
):
    from osu_dl_bench.measurement.p2p import staged_messages

    send, recv = cupy.zeros(8, np.uint8), cupy.zeros(8, np.uint8)
    device.staged(_noop, *staged_messages(benchmark, rank))(send, recv, None, 0)
    assert (copies["get"], copies["set"]) == expected


def _live_pinned_bytes(monkeypatch) -> dict[int, int]:
    """The pinned host arrays device allocates from now on that are still alive, by id:
    their bytes as cupy's pinned pool allocates them."""
    import weakref

    live: dict[int, int] = {}
    real = device._pinned

    def tracked(shape, dtype):
        array = real(shape, dtype)
        live[id(array)] = device.pinned_bytes(array.nbytes)
        weakref.finalize(array, live.pop, id(array))
        return array

    monkeypatch.setattr(device, "_pinned", tracked)
    return live


def test_staging_holds_bounded_pinned_memory_over_sizes_and_variants(cupy, monkeypatch):
    live = _live_pinned_bytes(monkeypatch)
    monkeypatch.setattr(device, "RECV_MIRROR_BYTES", 2**16)
    variants = [device.staged(_noop), device.staged(_noop)]
    for exponent in range(4, 17):
        n = 2**exponent // 4
        send, recv = cupy.zeros(n, np.float32), cupy.zeros(n, np.float32)
        for call in variants:
            call(send, recv, None, 0)
    # One shared send block of the last size, and each variant's receive mirrors within
    # RECV_MIRROR_BYTES (here the last size).
    assert sum(live.values()) <= 3 * 2**16


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled"])
def test_a_staged_calls_receive_mirrors_peak_at_recv_mirror_bytes(cupy, monkeypatch, order):
    live = _live_pinned_bytes(monkeypatch)
    peak = [0]
    monkeypatch.setattr(device, "RECV_MIRROR_BYTES", 2**16)
    sizes = [2**exponent for exponent in range(4, 17)]
    sizes = {"ascending": sizes, "descending": sizes[::-1]}.get(order, sizes[5:] + sizes[:5])
    call = device.staged(_noop)
    for nbytes in sizes:
        call(None, cupy.zeros(nbytes // 4, np.float32), None, 0)  # in place: no send block
        peak[0] = max(peak[0], sum(live.values()))
    bound = device.recv_mirror_bytes(sizes)
    assert peak[0] <= bound == 2**16
    if order == "ascending":  # every size's mirror kept until the largest needs room
        assert peak[0] == bound
    assert device.recv_mirror_bytes([2**20, 8]) == 2**20  # the current one alone
    assert device.recv_mirror_bytes([8, 8, 16]) == 2 * 512  # one mirror per size, rounded


def test_staging_pins_once_per_size_when_a_call_alternates_sizes(cupy, monkeypatch):
    # The trainer's buckets: one staged allreduce called with sizes in turn, every step.
    pinned = []
    real = device._pinned
    monkeypatch.setattr(
        device, "_pinned", lambda shape, dtype: pinned.append(shape) or real(shape, dtype)
    )
    call = device.staged(_noop)
    buckets = [cupy.zeros(n, np.float32) for n in (500, 6875, 3775)]
    for _step in range(5):
        for bucket in buckets:
            call(None, bucket, None, 0)
    # The send block (in place: none) and one receive mirror per bucket, pinned once.
    assert sorted(pinned) == [(500,), (3775,), (6875,)]


def test_a_failed_pin_warns_once_and_falls_back_to_pageable_memory(cupy, monkeypatch, capsys):
    monkeypatch.setattr(device, "_unpinned_warned", [])
    monkeypatch.setenv("STRICT_CUPY_PINNED_LIMIT", "1024")
    call = device.staged(_noop)
    for n in (1000, 2000):
        send, recv = cupy.zeros(n, np.float32), cupy.zeros(n, np.float32)
        call(send, recv, None, 0)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert "could not pin" in err[0] and "cudaErrorMemoryAllocation" in err[0]
    assert "4000" in err[0] or "3.9K" in err[0] or "4K" in err[0], err[0]


def test_the_hierarchical_bcast_stages_its_leaders_step_through_pinned_memory(cupy, monkeypatch):
    import cupyx

    from collectives.backends import nccl
    from collectives.topology import NodeComms

    given = []

    class Leaders:  # the leaders' communicator of two nodes, this rank on the root's
        def Bcast(self, buf, root):  # noqa: N802 - mpi4py's name
            given.append(buf)

    nodes = NodeComms(MPI.COMM_SELF, Leaders(), node=0, nodes=2)
    monkeypatch.setattr(nccl, "split_nodes", lambda comm: nodes)
    call = nccl.hierarchical_bcast(MPI.COMM_SELF)
    recv = cupy.asarray(np.arange(1000, dtype=np.float32))
    call(None, recv, None, 0)
    assert len(given) == 1 and given[0].nbytes == recv.nbytes
    assert cupyx.is_pinned(given[0])
    assert (given[0].view(np.float32) == np.arange(1000)).all()


# --- CUDA-awareness, each library's own way -----------------------------------------------

OPEN_MPI = "Open MPI v5.0.8, package: Open MPI builder Distribution"
MPICH = "MPICH Version:      4.2.0\nMPICH Release date: Fri Feb  9 2024"
MVAPICH2 = "MVAPICH2 Version      :\t2.3.7\nMVAPICH2 Release date :\tWed March 02 22:00:00 EST 2022"
MVAPICH_PLUS = "MVAPICH-Plus Version      :\t4.0\nMVAPICH-Plus Release date"
CRAY = "MPI VERSION    : CRAY MPICH version 8.1.28.2 (ANL base 3.4a2)"
SWITCHES = ("MV2_USE_CUDA", "MVP_USE_CUDA", "MPICH_GPU_SUPPORT_ENABLED")


@pytest.fixture
def no_switches(monkeypatch):
    """No override and no library switch set; the library's query answers ``query``."""
    for name in (device.CUDA_AWARE_ENV, *SWITCHES):
        monkeypatch.delenv(name, raising=False)

    def answer(value):
        monkeypatch.setattr(device, "query_cuda_support", lambda: value)

    return answer


@pytest.mark.parametrize(
    "text,name",
    [
        (OPEN_MPI, "openmpi"),
        (MPICH, "mpich"),
        (MVAPICH2, "mvapich2"),
        (MVAPICH_PLUS, "mvapich"),
        (CRAY, "cray-mpich"),
        ("Intel(R) MPI Library 2021.10", "intel"),
        ("Some MPI", "unknown"),
    ],
)
def test_the_library_build_is_named_from_its_version_text(text, name):
    from collectives.mpit import distribution_of

    assert distribution_of(text) == name


@pytest.mark.parametrize(
    "library,switch",
    [
        (MVAPICH2, "MV2_USE_CUDA"),
        (MVAPICH_PLUS, "MVP_USE_CUDA"),
        (CRAY, "MPICH_GPU_SUPPORT_ENABLED"),
    ],
)
def test_each_library_switch_counts_for_its_own_library_only(
    no_switches, monkeypatch, library, switch
):
    no_switches(None)
    monkeypatch.setenv(switch, "1")
    assert device.cuda_awareness(library) == device.CudaAwareness(True, f"{switch}=1")
    for other in (OPEN_MPI, MPICH, *(t for t in (MVAPICH2, MVAPICH_PLUS, CRAY) if t != library)):
        found = device.cuda_awareness(other)
        assert not found.aware and found.path == "staged", (other, found)


def test_mvapich_built_with_cuda_is_staged_until_its_switch_turns_cuda_on(no_switches):
    no_switches(True)  # MVAPICH answers 1 whenever it was built with CUDA
    found = device.cuda_awareness(MVAPICH_PLUS)
    assert found == device.CudaAwareness(False, "MVP_USE_CUDA=unset: staged")


@pytest.mark.parametrize("answer", [True, False, None])
def test_open_mpi_and_mpich_answer_through_their_query(no_switches, monkeypatch, answer):
    no_switches(answer)
    monkeypatch.setenv("MV2_USE_CUDA", "1")  # another library's switch: ignored
    found = device.cuda_awareness(MPICH)
    assert found.aware is bool(answer)
    expected = {True: "MPIX_Query_cuda_support=1", False: "MPIX_Query_cuda_support=0: staged"}
    assert found.source == expected.get(answer, device.STAGED_NOTHING_FOUND)


@pytest.mark.parametrize("forced", ["0", "1"])
def test_the_override_wins_over_every_library_answer(no_switches, monkeypatch, forced):
    no_switches(forced != "1")
    monkeypatch.setenv("MPICH_GPU_SUPPORT_ENABLED", "1" if forced == "0" else "0")
    monkeypatch.setenv(device.CUDA_AWARE_ENV, forced)
    for library in (OPEN_MPI, CRAY):
        found = device.cuda_awareness(library)
        assert found == device.CudaAwareness(forced == "1", f"{device.CUDA_AWARE_ENV}={forced}")
    assert device.cuda_aware() is (forced == "1")


@pytest.mark.parametrize("value", ["yes", "2", "1x", "true", "-1"])
def test_an_override_that_is_neither_0_nor_1_is_refused(no_switches, monkeypatch, value):
    from collectives.errors import UsageError

    no_switches(True)
    monkeypatch.setenv(device.CUDA_AWARE_ENV, value)
    with pytest.raises(UsageError, match=f"{device.CUDA_AWARE_ENV}='{value}': expected 1 .* 0"):
        device.cuda_awareness(MPICH)


def test_an_empty_override_is_unset(no_switches, monkeypatch):
    no_switches(True)
    monkeypatch.setenv(device.CUDA_AWARE_ENV, " ")
    assert device.cuda_awareness(MPICH) == device.CudaAwareness(True, "MPIX_Query_cuda_support=1")


def test_a_library_switch_s_unprintable_value_is_recorded_escaped(no_switches, monkeypatch):
    no_switches(None)
    monkeypatch.setenv("MPICH_GPU_SUPPORT_ENABLED", "\x1b[2J1")
    found = device.cuda_awareness(CRAY)
    assert found == device.CudaAwareness(False, "MPICH_GPU_SUPPORT_ENABLED='\\x1b[2J1': staged")
    assert found.source.isprintable()


# --- NCCL's eligibility: MIG and one decision for every rank -----------------------------


def test_mig_instances_are_found_by_name_and_by_their_shared_bus_id():
    assert device.mig_reason("0,1") is None and device.mig_reason("") is None
    reason = device.mig_reason("MIG-4f1c0a2e-1b2c-5d6e-8f90-123456789abc")
    assert "MIG instance (MIG-4f1c0a2e" in reason and "NCCL" in reason
    assert device.same_board_reason(["0000:01:00", "0000:02:00"]) is None
    assert "ranks 0 and 2 use MIG instances" in device.same_board_reason(["a", "b", "a"])


class _Gathered:
    """A communicator whose allgather returns what the ranks gave (one process)."""

    def __init__(self, given):
        self.given = given

    def allgather(self, mine):
        return self.given


def test_every_rank_gets_the_first_reason_naming_its_node():
    given = [("node-a", None), ("node-b", "ranks share a GPU"), ("node-b", "ranks share a GPU")]
    reason = device.agreed_nccl_reason(_Gathered(given), None, "node-a")
    assert reason == "on node-b (rank 1): ranks share a GPU"
    assert device.agreed_nccl_reason(_Gathered([("a", None), ("b", None)]), None, "a") is None


def test_a_rank_on_a_mig_instance_is_refused_nccl(cupy, monkeypatch):
    from cupy.cuda import runtime

    monkeypatch.setenv("STRICT_CUPY_MIG", "2")
    name = next(iter(runtime.mig_names()))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", name)
    assert device.select_local_gpu(MPI.COMM_SELF) == 0
    assert name in device.gpu_sharing_reason() and "MIG" in device.gpu_sharing_reason()
    assert "MIG" in device.expected_sharing_reason(1)


def test_two_mig_instances_of_one_gpu_are_refused_for_a_planned_job(cupy, monkeypatch):
    from cupy.cuda import runtime

    monkeypatch.setenv("STRICT_CUPY_MIG", "2")
    names = [n for n, place in runtime.mig_names().items() if place[0] == 0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(names))
    monkeypatch.setattr(device, "mig_reason", lambda visible=None: None)  # by bus id alone
    assert "use MIG instances of one GPU" in device.expected_sharing_reason(2)
