"""train.comparison: the isolation groups of train-bench's configurations (Gloo's apart,
native in every group) and the variants a tuned table may bind."""

from pathlib import Path
from types import SimpleNamespace

from collectives.registry import lookup
from osu_dl_bench.selection.selector import Selector
from osu_dl_bench.train.comparison import (
    Configuration,
    home_group,
    in_launch,
    only_these,
    possible_labels,
    selector_variants,
)

REFERENCE_TABLE = (
    Path(__file__).resolve().parents[2] / "tuning_tables" / "reference-cpu-mpich-1node.json"
)
_SHAPE = SimpleNamespace(nprocs=2, nodes=1, ppn=2)


def test_a_configuration_that_may_bind_gloo_is_in_the_gloo_group():
    gloo = lookup("allreduce", "gloo").variant()
    ring, native = lookup("allreduce", "ring").variant(), lookup("allreduce", "native").variant()
    assert home_group([ring, native]) == "mpi"
    assert home_group([]) == "mpi"
    assert home_group([ring, gloo, native]) == "gloo"


def test_native_runs_in_every_group_the_others_in_their_own():
    home = {"native": "mpi", "tuned": "mpi", "gloo": "gloo", "ddp-gloo": "gloo"}
    launched = {
        group: [label for label, g in home.items() if in_launch(label, g, group)]
        for group in ("mpi", "gloo", None)
    }
    assert launched == {
        "mpi": ["native", "tuned"],
        "gloo": ["native", "gloo", "ddp-gloo"],
        None: list(home),
    }


def test_a_table_naming_gloo_puts_tuned_in_the_gloo_group():
    selector = Selector.from_file(REFERENCE_TABLE, force={})
    variants = selector_variants(selector, _SHAPE, "cpu")
    assert {v.algorithm.name for v in variants} >= {"native"}
    assert home_group(variants) == "mpi"
    fixed = selector.with_fixed({"allreduce": lookup("allreduce", "gloo").variant()})
    assert home_group(selector_variants(fixed, _SHAPE, "cpu")) == "gloo"


def _gpu_session(cupy, monkeypatch, nccl_in_torch: bool):
    """A one-rank session on GPU buffers over the strict cupy stand-in."""
    import torch.distributed as dist
    from mpi4py import MPI

    from osu_dl_bench.runtime.topology import Topology
    from osu_dl_bench.train.comm_thread import CommThread
    from osu_dl_bench.train.config import TrainConfig
    from osu_dl_bench.train.policy import build_policy
    from osu_dl_bench.train.session import Session

    monkeypatch.setattr(dist, "is_nccl_available", lambda: nccl_in_torch)
    cfg = TrainConfig(buffers="cuda", bcast="native")
    topology = Topology(1, 1, 1, ("host",))
    policy = build_policy(cfg, MPI.COMM_SELF, topology)
    return Session(MPI.COMM_SELF, topology, policy, CommThread(inline=True)), cfg


def test_on_gpus_ddp_over_nccl_is_measured_beside_ddp_over_gloo_in_its_own_group(cupy, monkeypatch):
    from osu_dl_bench.train.comparison import configurations, groups_for

    session, cfg = _gpu_session(cupy, monkeypatch, nccl_in_torch=True)
    configs, _ = configurations(session, cfg, None)
    ddp = {c.label: (c.group, c.ddp_backend) for c in configs if c.policy is None}
    assert ddp == {"ddp-gloo": ("gloo", "gloo"), "ddp-nccl": ("nccl", "nccl")}
    assert groups_for("cuda") == ("mpi", "gloo", "nccl") and groups_for("cpu") == ("mpi", "gloo")


def test_ddp_over_nccl_is_skipped_with_the_reason_where_torch_has_no_nccl(cupy, monkeypatch):
    from osu_dl_bench.train.comparison import configurations

    session, cfg = _gpu_session(cupy, monkeypatch, nccl_in_torch=False)
    configs, skipped = configurations(session, cfg, None)
    assert "ddp-nccl" not in {c.label for c in configs}
    assert any(s.startswith("ddp-nccl: skipped: torch.distributed has no NCCL") for s in skipped)


def test_on_cpus_there_is_no_ddp_over_nccl():
    from mpi4py import MPI

    from osu_dl_bench.runtime.topology import Topology
    from osu_dl_bench.train.comm_thread import CommThread
    from osu_dl_bench.train.comparison import configurations
    from osu_dl_bench.train.config import TrainConfig
    from osu_dl_bench.train.policy import build_policy
    from osu_dl_bench.train.session import Session

    cfg, topology = TrainConfig(), Topology(1, 1, 1, ("host",))
    policy = build_policy(cfg, MPI.COMM_SELF, topology)
    session = Session(MPI.COMM_SELF, topology, policy, CommThread(inline=True))
    configs, skipped = configurations(session, cfg, None)
    labels = {c.label for c in configs} | {s.split(":")[0] for s in skipped}
    assert "ddp-gloo" in labels and "ddp-nccl" not in labels


def test_only_keeps_the_named_configurations_and_native_and_names_the_absent_ones():
    configs = [Configuration(label, "mpi", None) for label in ("native", "ring", "nccl")]
    configs.append(Configuration("tree:seg=256K,trees=1", "mpi", None))
    configs.append(Configuration("ddp-nccl", "nccl", None))
    kept, left = only_these(configs, "ddp-nccl,gloo,nccl,tree:seg=256K,trees=1")
    assert [c.label for c in kept] == ["native", "nccl", "tree:seg=256K,trees=1", "ddp-nccl"]
    assert left == ["ring: not measured (--only)", "gloo: not measured: not available here"]
    assert only_these(configs, None) == (configs, [])


def test_every_label_a_configuration_carries_is_a_possible_label():
    labels = possible_labels()
    assert {"native", "tuned", "ddp-gloo", "ddp-nccl", "native/no-overlap"} <= labels
    assert {"ring:seg=256K", "tree:seg=256K,trees=1", "cma:chunk=512K/registered"} <= labels
    assert "bogus" not in labels


def test_on_gpus_the_fixed_algorithms_are_judged_and_bound_for_gpu_buffers(nccl, monkeypatch):
    # On an H200, judged on cpu buffers, nccl's launch failed: "--allreduce nccl cannot run
    # here (float32, p=1): it needs GPU (cuda) buffers".
    from osu_dl_bench.train.comparison import configurations

    session, cfg = _gpu_session(nccl, monkeypatch, nccl_in_torch=True)
    configs, skipped = configurations(session, cfg, None)
    fixed = {c.label: c for c in configs if c.policy is not None}
    assert "nccl" in fixed and fixed["nccl"].group == "nccl", skipped
    assert fixed["nccl"].policy.device == "cuda"
    assert fixed["nccl"].policy.choose("allreduce", 1 << 20).label == "nccl"


def test_the_table_train_adapt_wrote_is_measured_beside_tuned_with_its_own_choices(tmp_path):
    from mpi4py import MPI
    from support.tuning import make_entry, make_table

    from osu_dl_bench.runtime.topology import Topology
    from osu_dl_bench.train.comm_thread import CommThread
    from osu_dl_bench.train.comparison import ADAPTED, configurations
    from osu_dl_bench.train.config import TrainConfig
    from osu_dl_bench.train.policy import build_policy
    from osu_dl_bench.train.session import Session

    cfg, topology = TrainConfig(), Topology(1, 1, 1, ("host",))
    session = Session(
        MPI.COMM_SELF, topology, build_policy(cfg, MPI.COMM_SELF, topology), CommThread(True)
    )
    entries = make_entry(1, [(0, "ring")]), make_entry(1, [(0, "native")], "bcast")
    adapted = make_table(*entries).write(tmp_path / "adapted.json")
    configs, skipped = configurations(session, cfg, str(REFERENCE_TABLE), str(adapted))
    by_label = {c.label: c for c in configs}
    assert by_label[ADAPTED].policy.choose("allreduce", 1 << 20).label.startswith("ring")
    assert by_label["tuned"].policy is not by_label[ADAPTED].policy
    assert ADAPTED in possible_labels()
    assert not any(s.startswith(ADAPTED) for s in skipped)
    without, _ = configurations(session, cfg, str(REFERENCE_TABLE))
    assert ADAPTED not in {c.label for c in without}
