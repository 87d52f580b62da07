"""measurement.bounds: what bench --bounds times, named for what it is (numpy's memcpy on
the host; on a GPU the device's memcpy, cudaMemcpyAsync, and a copy kernel), timed in the
same interleaved rounds as the candidates and never checked; records written when the
device's memcpy was called ``copy`` still print."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from osu_dl_bench.cli import build_parser
from osu_dl_bench.commands import bench
from osu_dl_bench.commands.bench_cli import config_from_args
from osu_dl_bench.measurement import bounds, harness, report


@pytest.mark.parametrize("aware,expected", [("1", ("memcpy", "copy-kernel")), ("0", None)])
def test_the_bounds_are_named_for_what_they_time(monkeypatch, aware, expected):
    monkeypatch.setenv("OSU_DL_BENCH_CUDA_AWARE", aware)
    assert bounds.bound_labels("cpu") == ("copy",)
    assert bounds.bound_labels("cuda") == (expected or ("memcpy", "copy-kernel", "staging"))
    assert "numpy" in bounds.description("copy", "cpu")
    assert "cudaMemcpyAsync device to device" in bounds.description("memcpy", "cuda")
    assert "kernel on the SMs" in bounds.description("copy-kernel", "cuda")
    for name in bounds.bound_labels("cuda"):
        assert "copy kernel" not in bounds.description(name, "cuda") or name == "copy-kernel"


def test_old_records_whose_device_memcpy_is_named_copy_still_print(monkeypatch):
    argv = ["bench", "allreduce", "-d", "cuda", "--bounds", "-m", "8:8"]
    cfg = config_from_args(build_parser().parse_args(argv))
    lines = report.header_lines(cfg, "copy", bounds.BACKEND, 1)
    bound = next(line for line in lines if line.startswith("# Bound:"))
    assert "recorded as 'copy'" in bound and "cudaMemcpyAsync device to device" in bound


def _calls_in_order(monkeypatch, cupy) -> list[str]:
    """Every call bench makes at its one size, by label, in order."""
    order: list[str] = []

    def recorded(label, call):
        def call_recorded(send, recv, op, root):
            order.append(label)
            call(send, recv, op, root)

        return call_recorded

    real_calls, real_bounds = harness.device_calls, harness.bound_calls

    def candidates(comm, binder, variants, device):
        calls = real_calls(comm, binder, variants, device)
        return [recorded(v.label, c) for v, c in zip(variants, calls, strict=True)]

    def bound_calls(device, *args):
        calls = real_bounds(device, *args)
        return [recorded(n, c) for n, c in zip(bounds.bound_labels(device), calls, strict=True)]

    monkeypatch.setattr(harness, "device_calls", candidates)
    monkeypatch.setattr(harness, "bound_calls", bound_calls)
    argv = ["bench", "allreduce", "-d", "cuda", "-a", "native,ring", "--bounds", "-c"]
    cfg = config_from_args(build_parser().parse_args([*argv, "-m", "64:64", "-i", "3", "-x", "1"]))
    assert bench.run_bench(MPI.COMM_SELF, cfg) == 0
    return order


def test_the_bounds_are_timed_in_the_candidates_rounds_and_never_checked(plain_mpi, monkeypatch):
    order = _calls_in_order(monkeypatch, plain_mpi)
    one_round = ["native", "ring:seg=256K", "memcpy", "copy-kernel", "staging"]
    rounds = 1 + 3  # warm-up and timed iterations, each one round of every call
    assert order[: rounds * len(one_round)] == one_round * rounds
    # Then the check: the candidates alone, on restored inputs, and every one passed.
    assert order[rounds * len(one_round) :] == ["native", "ring:seg=256K"]


def test_a_staged_bcasts_staging_bound_copies_as_the_staged_bcast_does(plain_mpi, monkeypatch):
    from collectives import SPECS

    copies = {"get": 0, "set": 0}
    for name in copies:
        real = getattr(plain_mpi.ndarray, name)

        def counted(self, *args, _name=name, _real=real, **kwargs):
            copies[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(plain_mpi.ndarray, name, counted)
    recv = plain_mpi.zeros(16, np.float32)
    for rank, expected in ((0, {"get": 1, "set": 0}), (1, {"get": 0, "set": 1})):
        calls = bounds.bound_calls(
            "cuda", plain_mpi, 16, np.dtype(np.float32), SPECS["bcast"], rank
        )
        copies.update(get=0, set=0)
        calls[bounds.bound_labels("cuda").index("staging")](None, recv, None, 0)
        assert copies == expected, rank  # the root: one copy to the host; the others: back
