"""train.comparison: the isolation groups of train-bench's configurations (Gloo's apart,
native in every group) and the variants a tuned table may bind."""

from pathlib import Path
from types import SimpleNamespace

from collectives.registry import lookup
from osu_dl_bench.selection.selector import Selector
from osu_dl_bench.train.comparison import home_group, in_launch, selector_variants

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
