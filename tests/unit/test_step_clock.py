"""The trainer's step clock: on a GPU, busy, exposed and hidden from CUDA events on the
compute and communication streams (tests/support/strict_torch_cuda.py: a scripted device
clock on which the host returns from backward before the device has run it), on the CPU
the host's clock."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from support.strict_torch_cuda import StrictTorchCuda

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="no torch")

REDUCE_MS = 3.0


@pytest.fixture
def gpu(monkeypatch):
    return StrictTorchCuda().install(monkeypatch)


def _two_buckets():
    """y = sum(w1 * (w0 * x)): backward writes w1's gradient, then w0's; one bucket each."""
    import torch

    from osu_dl_bench.train.buckets import make_buckets

    w0, w1 = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(4))
    buckets = make_buckets([w0, w1], cap=16, first_cap=16)
    assert [b.params for b in buckets] == [[w1], [w0]]
    return w0, w1, buckets


def _step_on_the_scripted_device(gpu, cupy, thread, overlap: bool = True):
    """Backward's kernels: 2 ms per gradient, then 1 ms more after the last hook (backward
    ends at 5 ms on the device while the host returned at 0); each reduction 3 ms on the
    communication thread's stream, waited for as NCCL's calls are."""
    import torch

    from collectives.device import use_own_stream
    from osu_dl_bench.train.device import DeviceClock
    from osu_dl_bench.train.reducer import GradientReducer

    w0, w1, buckets = _two_buckets()
    compute = gpu.current_stream()
    for param in (w0, w1):  # registered first: they run before the reducer's hooks
        param.register_post_accumulate_grad_hook(lambda _p: compute.run(2.0))

    def reduce(array):
        stream = torch.cuda.ExternalStream(cupy.cuda.get_current_stream().ptr)
        stream.run(REDUCE_MS)
        stream.synchronize()

    thread.run(use_own_stream)  # as train.device.communication_gpu does
    clock = DeviceClock(torch.device("cuda", 0))
    reducer = GradientReducer(buckets, [reduce, reduce], thread, overlap, clock)
    reducer.start_step()
    (w1 * (w0 * torch.ones(4))).sum().backward()
    compute.run(1.0)  # backward's last kernels, queued before it returned
    comm = reducer.finish_step()
    reducer.remove_hooks()
    return comm


def test_exposed_counts_from_backwards_end_on_the_device_not_the_hosts_return(gpu, cupy):
    from osu_dl_bench.train.comm_thread import CommThread

    with CommThread() as thread:
        comm = _step_on_the_scripted_device(gpu, cupy, thread)
    # Bucket 0 reduces 2-5 ms, bucket 1 5-8 ms; backward ends at 5 ms: 3 of 6 ms exposed.
    # The host clock counted from the host's return (0 ms): 8 ms exposed, 0% hidden.
    assert comm.clock == "cuda events"
    assert comm.busy == pytest.approx(2 * REDUCE_MS / 1e3)
    assert comm.exposed == pytest.approx(3.0 / 1e3)
    assert 1 - comm.exposed / comm.busy == pytest.approx(0.5)
    offsets = [(b.ready, b.start, b.end) for b in comm.buckets]
    assert np.allclose(offsets, np.array([(-3, -3, 0), (-1, 0, 3)]) / 1e3)


def test_without_overlap_everything_reduced_after_backward_is_exposed(gpu, cupy):
    from osu_dl_bench.train.comm_thread import CommThread

    with CommThread() as thread:
        comm = _step_on_the_scripted_device(gpu, cupy, thread, overlap=False)
    assert comm.busy == pytest.approx(comm.exposed) and comm.exposed == pytest.approx(6e-3)


def test_events_are_read_only_after_the_device_reached_them(gpu):
    import torch

    from osu_dl_bench.train.device import DeviceClock, Span

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with pytest.raises(RuntimeError, match="Both events must be recorded"):
        start.elapsed_time(end)
    start.record()
    gpu.current_stream().run(4.0)
    end.record()
    with pytest.raises(RuntimeError, match="device not ready"):
        start.elapsed_time(end)
    clock = DeviceClock(torch.device("cuda", 0), comm_stream=gpu.current_stream)
    ready = clock.compute_mark()
    comm = clock.step(start, [Span(ready, clock.comm_mark(), end)])  # synchronizes first
    assert comm.busy == pytest.approx(0.0) and comm.exposed == pytest.approx(4e-3)


def test_on_the_cpu_the_clock_is_the_hosts():
    import torch

    from osu_dl_bench.train.comm_thread import CommThread
    from osu_dl_bench.train.reducer import GradientReducer

    w0, w1, buckets = _two_buckets()
    with CommThread() as thread:
        reducer = GradientReducer(buckets, [lambda a: None] * 2, thread)
        reducer.start_step()
        (w1 * (w0 * torch.ones(4))).sum().backward()
        comm = reducer.finish_step()
    assert comm.clock == "host" and comm.busy >= 0 and comm.exposed >= 0
    assert len(comm.buckets) == 2 and all(b.ready <= b.start <= b.end for b in comm.buckets)


def test_the_record_keeps_the_old_fields_and_adds_the_clock_and_each_bucket():
    from osu_dl_bench.train.records import comm_record
    from osu_dl_bench.train.report import footer_lines

    # 2 ranks x 4 steps: busy 6 ms, exposed 3 ms per rank-step; one bucket.
    sums = np.array([8 * 6e-3, 8 * 3e-3, 8 * 10e-3, 8])
    record = comm_record(sums, 2, 0.0, "cuda events", np.array([[-8 * 3e-3, 0.0, 8 * 3e-3]]))
    assert (record.busy_ms, record.exposed_ms, record.hidden_fraction) == pytest.approx(
        (6.0, 3.0, 0.5)
    )
    assert record.clock == "cuda events"
    assert [(b.index, b.ready_ms, b.start_ms, b.end_ms) for b in record.buckets] == [
        (0, pytest.approx(-3.0), 0.0, pytest.approx(3.0))
    ]
    from dataclasses import asdict, replace

    from osu_dl_bench.train.records import TrainSummary

    fields = set(asdict(record))
    assert {"busy_ms", "exposed_ms", "hidden_fraction", "step_ms", "bcast_ms"} <= fields
    summary = TrainSummary({}, 2, 1, 2, "cnn", 1, "d", 1, 0, 1, 0, 4, [], [])
    line = footer_lines(replace(summary, communication=record))[-1]
    assert "3.00 ms exposed, 50.0% hidden behind backward" in line
    assert "timed with CUDA events on the compute and communication streams" in line
    old = comm_record(np.array([1.0, 1.0, 1.0, 1]), 1, 0.0)
    assert old.clock == "host" and old.buckets == []


def test_the_table_checks_call_times_are_the_communication_streams_spans(gpu, cupy):
    """--check-table times each call from the step's marks: on a GPU the events on the
    communication thread's stream (3 ms each), not the host's return from queueing."""
    from osu_dl_bench.train.check import call_durations
    from osu_dl_bench.train.comm_thread import CommThread

    with CommThread() as thread:
        steps = [_step_on_the_scripted_device(gpu, cupy, thread) for _ in range(2)]
    spans = [[(b.ready, b.start, b.end) for b in comm.buckets] for comm in steps]
    assert np.allclose(call_durations(spans), REDUCE_MS / 1e3)
