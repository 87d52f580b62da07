"""The trainer's collective policy on GPU buffers, on the strict cupy stand-in: its choice
is bound the way bench -a tuned binds it (staged where MPI is not CUDA-aware), host arrays
of a GPU run (the metric sums) are decided as cpu buffers, and nccl is never handed numpy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from mpi4py import MPI
from support.tuning import make_entry, make_table

from collectives import registry
from collectives.ops import reduce_op
from osu_dl_bench.runtime.topology import Topology
from osu_dl_bench.selection import Selector
from osu_dl_bench.train.comm_thread import CommThread
from osu_dl_bench.train.policy import FixedPolicy, SelectorPolicy, call_context
from osu_dl_bench.train.session import Session

ONE_RANK = Topology(1, 1, 1, ("host",))


def _session(policy) -> Session:
    return Session(MPI.COMM_SELF, ONE_RANK, policy, CommThread(inline=True))


def _cuda_table(name: str):
    entry = make_entry(1, [(0, name)])
    return make_table(dataclasses.replace(entry, key=dataclasses.replace(entry.key, device="cuda")))


def test_the_policy_binds_its_choice_as_the_selector_does_staged_on_plain_mpi(plain_mpi):
    selector = Selector(force={})
    policy = SelectorPolicy(MPI.COMM_SELF, ONE_RANK, selector, device="cuda")
    gradients = plain_mpi.asarray(np.full(5, 2.0, np.float32))
    plain_mpi.cuda.Device().synchronize()
    bound = policy.choose("allreduce", gradients.nbytes)
    bound.call(None, gradients, reduce_op("sum"), 0)  # unstaged, MPI would get device memory
    assert (gradients.get() == 2.0).all() and not plain_mpi.violations
    context = call_context(ONE_RANK, "allreduce", "float32", "cuda")
    native = registry.lookup("allreduce", "native").variant()
    assert bound.call is selector.bind_variant(MPI.COMM_SELF, native, context)


@pytest.mark.parametrize("how", ["fixed", "table"])
def test_host_arrays_of_a_gpu_run_are_decided_on_cpu_and_nccl_never_gets_numpy(nccl, how):
    variant = registry.lookup("allreduce", "nccl").variant()
    if how == "fixed":
        policy = FixedPolicy(MPI.COMM_SELF, ONE_RANK, {"allreduce": variant}, device="cuda")
    else:
        selector = Selector(_cuda_table("nccl"), force={})
        policy = SelectorPolicy(MPI.COMM_SELF, ONE_RANK, selector, ("allreduce",), "cuda")
    session = _session(policy)
    sums = np.array([1.5, 2.0, 3.0])  # float64 metric sums, 24 bytes
    assert session.choose("allreduce", sums).label == "native"
    session.allreduce_sum(sums)
    assert sums.tolist() == [1.5, 2.0, 3.0]
    gradients = nccl.asarray(np.ones(4, np.float32))
    nccl.cuda.Device().synchronize()
    assert session.choose("allreduce", gradients).label == "nccl"
    session.allreduce_sum(gradients)
    assert (gradients.get() == 1).all()


def test_the_communication_thread_has_its_own_non_blocking_stream(nccl, monkeypatch):
    import torch

    from osu_dl_bench.train import device as train_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    policy = SelectorPolicy(MPI.COMM_SELF, ONE_RANK, Selector(force={}), device="cuda")
    with CommThread() as thread:
        session = Session(MPI.COMM_SELF, ONE_RANK, policy, thread)
        assert train_device.place("cuda", session) == torch.device("cuda", 0)
        stream = thread.run(nccl.cuda.get_current_stream)
        # The legacy default stream is ordered with torch's kernels: no overlap there.
        assert stream is not nccl.cuda.Stream.null and stream.non_blocking
        assert nccl.cuda.get_current_stream() is nccl.cuda.Stream.null
        gradients = nccl.asarray(np.ones(4, np.float32))  # the "backward" on the main thread
        nccl.cuda.Stream.null.synchronize()  # what the trainer's event wait stands for
        session.allreduce_sum(gradients)  # on the communication thread
        assert (gradients.get() == 1).all() and not nccl.violations


def _gpu_policy(**settings):
    from osu_dl_bench.train.config import TrainConfig
    from osu_dl_bench.train.policy import build_policy, gpu_default

    cfg = TrainConfig(buffers="cuda", **settings)
    default = gpu_default(cfg, MPI.COMM_SELF, ONE_RANK)
    return build_policy(cfg, MPI.COMM_SELF, ONE_RANK, default)


def test_on_gpus_without_a_table_nccl_is_the_default_where_each_rank_has_its_own(nccl):
    from osu_dl_bench.train.policy import GPU_DEFAULT_HOW

    policy = _gpu_policy()
    gradients = nccl.asarray(np.ones(4, np.float32))
    nccl.cuda.Device().synchronize()
    for collective in ("allreduce", "bcast"):
        bound = policy.choose(collective, gradients.nbytes)
        assert (bound.label, bound.how) == ("nccl", GPU_DEFAULT_HOW)
    assert policy.note == "" and policy.choose("allreduce", 24, "float64", "cpu").label == "native"


def test_on_gpus_an_allreduce_on_the_command_line_still_overrides_the_default(nccl):
    policy = _gpu_policy(allreduce="ring")
    assert policy.choose("allreduce", 1 << 20).label.startswith("ring")
    assert policy.choose("bcast", 1 << 20).label == "nccl"


def test_ranks_sharing_a_gpu_fall_back_to_staged_native_mpi_with_the_reason(nccl, monkeypatch):
    from collectives import device

    monkeypatch.setattr(device, "shared_gpu_reason", lambda uuids: "ranks 0 and 1 share GPU 0")
    policy = _gpu_policy()
    assert policy.choose("allreduce", 1 << 20).label == "native"
    assert policy.note == (
        "allreduce, bcast: staged native MPI, not nccl: nccl needs one GPU per rank "
        "(ranks of a node share a GPU, or use MIG instances)"
    )


def test_without_nccl_the_gpu_default_is_staged_native_mpi_with_the_reason(cupy, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    for collective in ("allreduce", "bcast"):
        registry._REGISTRY.pop((collective, "nccl"), None)
    monkeypatch.setitem(registry.UNAVAILABLE_BACKENDS, "nccl", "cupy has no NCCL: no module")
    policy = _gpu_policy()
    assert policy.choose("allreduce", 1 << 20).label == "native"
    assert (
        policy.note == "allreduce, bcast: staged native MPI, not nccl: cupy has no NCCL: no module"
    )


def test_a_table_on_gpus_decides_instead_of_the_nccl_default(nccl, tmp_path):
    from osu_dl_bench.train.config import TrainConfig
    from osu_dl_bench.train.policy import gpu_default

    default = gpu_default(TrainConfig(buffers="cuda", table="t.json"), MPI.COMM_SELF, ONE_RANK)
    assert default.collectives == () and default.note == ""
    assert gpu_default(TrainConfig(), MPI.COMM_SELF, ONE_RANK).collectives == ()


def test_the_header_says_why_the_gpu_default_runs_and_why_it_fell_back():
    from osu_dl_bench.train.config import TrainConfig
    from osu_dl_bench.train.policy import GPU_DEFAULT_HOW
    from osu_dl_bench.train.records import TrainSummary
    from osu_dl_bench.train.report import header_lines

    plan = {"nbytes": 4096, "algorithm": "nccl", "how": GPU_DEFAULT_HOW}
    summary = TrainSummary(
        dataclasses.asdict(TrainConfig(buffers="cuda")), 2, 1, 2, "cnn", 10, "digits",
        100, 0, 1, 0, 5, [plan, plan], [plan],
    )  # fmt: skip
    text = "\n".join(header_lines(summary))
    assert "# allreduce: nccl x2 (default on GPUs: one GPU per rank, NCCL available)" in text
    fallback = dataclasses.replace(summary, policy_note="allreduce, bcast: staged native MPI")
    assert header_lines(fallback)[-1] == "# allreduce, bcast: staged native MPI"


def test_a_bad_fixed_algorithm_on_gpus_is_left_to_the_agreed_policy_check(nccl):
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.train.config import TrainConfig
    from osu_dl_bench.train.policy import build_policy, gpu_default

    cfg = TrainConfig(buffers="cuda", allreduce="nosuch")
    default = gpu_default(cfg, MPI.COMM_SELF, ONE_RANK)  # no error outside the agreement
    with pytest.raises(UsageError, match="unknown algorithm 'nosuch'"):
        build_policy(cfg, MPI.COMM_SELF, ONE_RANK, default)
