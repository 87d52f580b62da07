"""The algorithm catalog is data: names, parameters, requirements, costs and library
counterparts are read without starting MPI, and the commands derive their lists from it."""

import inspect
import itertools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.exports import export_files
from support.interpreter import python_json
from support.options import command_config
from support.tuning import make_entry, make_table

from collectives import registry
from collectives.common import LinkCost, Machine
from collectives.registry import LIBRARIES, Algorithm, Counterpart, Split, largest_block
from collectives.specs import SPECS
from osu_dl_bench.jobs.sweep_config import parse_collectives
from osu_dl_bench.measurement import bench_config, report
from osu_dl_bench.model.mpich_native import mpich_algorithm, native_label

# Reads the whole catalog as `list`, the option help, the exports and the model do, then
# says whether mpi4py.MPI (whose import starts MPI) got loaded on the way.
_READ_THE_CATALOG = """
import json, sys
import collectives
from collectives import registry
from collectives.common import LinkCost, Machine
from osu_dl_bench.commands.listing import algorithm_listing

algos = registry.all_algorithms()
link = LinkCost(1e-6, 1e-9, 1e-10)
costs = [a.cost(Machine(link, link, 2), 4, 1 << 20, **a.defaults) for a in algos if a.cost]
variants = [v for c in collectives.SPECS for v in registry.parse_variants(c, "all")]
ring = registry.lookup("allreduce", "ring").variant(seg=0)
text = algorithm_listing()
print(json.dumps({
    "mpi_loaded": "mpi4py.MPI" in sys.modules,
    "algorithms": len(algos),
    "costs": len(costs),
    "variants": len(variants),
    "listed": len(text.splitlines()),
}))
"""


def _python(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; its last stdout line, parsed as JSON."""
    return python_json(code)


def test_reading_the_whole_catalog_starts_no_mpi():
    seen = _python(_READ_THE_CATALOG)
    assert seen["mpi_loaded"] is False
    assert seen["algorithms"] == len(registry.all_algorithms()) > 30
    assert seen["costs"] > 10 and seen["variants"] == seen["algorithms"]
    assert seen["listed"] > seen["algorithms"]


def test_the_thread_level_asked_for_holds_after_the_catalog_was_read():
    # Importing mpi4py.MPI starts MPI at THREAD_MULTIPLE unless mpi4py.rc says otherwise:
    # had the catalog imported it, init_mpi could no longer choose the level.
    seen = _python(
        _READ_THE_CATALOG
        + """
from osu_dl_bench.runtime.start import init_mpi
MPI = init_mpi("single")
print(json.dumps({"single": MPI.Query_thread() == MPI.THREAD_SINGLE}))
"""
    )
    assert seen == {"single": True}


def test_mpi_names_are_bound_as_plain_attributes_on_first_use():
    seen = _python(
        """
import json, sys
from collectives import mpi
from collectives.ops import reduce_op
made_before = reduce_op("sum")
probed = hasattr(mpi, "__path__") or hasattr(mpi, "__wrapped__")
loaded_by_probe = "mpi4py.MPI" in sys.modules
in_place = mpi.IN_PLACE
from mpi4py import MPI
from dataclasses import replace
made_after = replace(reduce_op("max"), name="max2")
print(json.dumps({
    "probed": probed,
    "loaded_by_probe": loaded_by_probe,
    "same_object": in_place is MPI.IN_PLACE,
    "hook_left": "__getattr__" in vars(mpi),
    "bound": vars(mpi).get("COMM_WORLD") is MPI.COMM_WORLD,
    "op_before_load": made_before.mpi is MPI.SUM,
    "op_after_load": made_after.mpi is MPI.MAX,
}))
"""
    )
    assert seen == {
        "probed": False,
        "loaded_by_probe": False,
        "same_object": True,
        "hook_left": False,
        "bound": True,
        "op_before_load": True,
        "op_after_load": True,
    }


def test_list_command_shows_every_registered_algorithm_in_catalog_order():
    done = subprocess.run(
        [sys.executable, "-m", "osu_dl_bench", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split()[:2] for line in done.stdout.splitlines()[1:]]
    listed = [row for row in rows if len(row) == 2 and row[0] in registry.SPECS]
    # The catalog of a fresh interpreter: in this one, test modules that import an
    # algorithm module (shm, cma) have registered its algorithms first.
    catalog = _python(
        "import json; from collectives import registry; "
        "print(json.dumps([[a.collective, a.name] for a in registry.all_algorithms()]))"
    )
    assert listed == catalog
    assert [row for row in listed if row[0] == "allreduce"][:2] == [
        ["allreduce", "native"],
        ["allreduce", "ring"],
    ]


def _bench_config(benchmark: str):
    return command_config("bench", benchmark)


def test_bench_and_sweep_offer_the_collectives_the_specs_describe():
    offered = bench_config.BENCHMARKS
    assert offered[: len(SPECS)] == tuple(SPECS)
    assert parse_collectives("all") == tuple(SPECS)


@pytest.mark.parametrize("name", list(SPECS))
def test_a_collectives_table_header_comes_from_its_spec(name):
    spec = SPECS[name]
    header = report.header_lines(_bench_config(name), "native", "mpi", 4)
    assert header[0].startswith(f"# OSU MPI {spec.title} Test (osu-dl-bench v")
    assert ("  Op: " in header[2]) == spec.reduces
    assert ("  Root: " in header[2]) == spec.rooted


def test_point_to_point_headers_keep_their_osu_titles():
    titles = [report.header_lines(_bench_config(t), "-", "mpi", 2)[0] for t in ("bw", "bibw")]
    assert titles[0].startswith("# OSU MPI Bandwidth Test")
    assert titles[1].startswith("# OSU MPI Bi-Directional Bandwidth Test")


def test_counterparts_are_declared_with_their_algorithms():
    ring = registry.lookup("allreduce", "ring").equivalents
    assert (ring["openmpi"].id, ring["openmpi"].name) == (4, "ring")
    assert ring["mpich"] == Counterpart("MPIR_Allreduce_intra_ring", params={"seg": 0})
    chain = registry.lookup("bcast", "chain").equivalents["openmpi"]
    assert (chain.id, chain.fanout, chain.segment) == (2, 1, "seg")
    smp = registry.lookup("allreduce", "hierarchical").equivalents["mpich"]
    assert smp.params == {"inner": "native"} and not smp.exported


def test_each_library_algorithm_stands_for_one_of_ours():
    for collective in SPECS:
        for library in LIBRARIES:
            names = [
                a.equivalents[library].name
                for a in registry.algorithms(collective)
                if library in a.equivalents
            ]
            assert len(names) == len(set(names)), (collective, library, names)
            for name in names:
                algo, found = registry.algorithm_like(collective, library, name)
                assert algo.equivalents[library] is found


def _signature_defaults(factory) -> dict:
    params = list(inspect.signature(factory).parameters.values())[1:]
    return {p.name: p.default for p in params}


def test_each_algorithms_defaults_are_those_of_its_factorys_signature():
    # Stated once, in the signature: a default changed there is the one -a, the sweep's
    # grid, the exports and the model all use.
    algos = registry.all_algorithms()
    differ = [a.name for a in algos if dict(a.defaults) != _signature_defaults(a.factory)]
    assert differ == [] and {a.name for a in algos if a.defaults} >= {"ring", "shm", "tree"}


def test_a_default_stated_again_in_register_is_refused():
    with pytest.raises(ValueError, match="state parameter defaults once, in the factory's"):
        registry.register("allreduce", "twice", defaults={"seg": 0})


def test_a_parameter_without_a_default_is_refused_at_registration():
    with pytest.raises(ValueError, match="parameter seg needs a default"):
        registry.register("allreduce", "bare")(lambda comm, seg: None)
    assert ("allreduce", "bare") not in registry._REGISTRY


@pytest.mark.parametrize(
    ("equivalents", "complaint"),
    [
        ({"intel": Counterpart("x")}, "unknown library 'intel'"),
        ({"openmpi": Counterpart("ring")}, "needs its coll/tuned id"),
        ({"mpich": Counterpart("x", params={"chunk": 0})}, "names no parameter chunk"),
        ({"mpich": Counterpart("x", params={"seg": 1})}, "seg expects 0 (whole blocks) or"),
    ],
)
def test_a_counterpart_that_cannot_hold_is_a_registration_error(equivalents, complaint):
    native = registry.lookup("allreduce", "native")
    with pytest.raises(ValueError, match=re.escape(complaint)):
        Algorithm(
            "allreduce",
            "mine",
            native.factory,
            defaults={"seg": 0},
            split=Split("seg", largest_block, zero_means_whole=True),
            equivalents=equivalents,
        )


def test_a_new_algorithm_reaches_both_exports_through_its_declaration(monkeypatch, tmp_path):
    """An allreduce declared with counterparts is exported as them: the exporters know no
    algorithm by name."""
    native = registry.lookup("allreduce", "native")
    mine = Algorithm(
        "allreduce",
        "segmented_ring",
        native.factory,
        defaults={"seg": 64 << 10},
        equivalents={
            "openmpi": Counterpart("segmented_ring", id=5, segment="seg"),
            "mpich": Counterpart("MPIR_Allreduce_intra_k_reduce_scatter_allgather"),
        },
    )
    monkeypatch.setitem(registry._REGISTRY, ("allreduce", "segmented_ring"), mine)
    table = make_table(make_entry(4, [(0, "native"), (4096, "segmented_ring:seg=128K")]))
    files, warnings = export_files(table, tmp_path)
    rules = files["exp.openmpi.rules"].read_text()
    assert "4096         5 0 131072   # [4K, inf): segmented_ring:seg=128K" in rules
    mpich = json.loads(files["exp.mpich.mpir.json"].read_text())
    sizes = mpich["collective=allreduce"]["comm_type=intra"]["comm_size=any"]
    # MPICH's choice sits under the commutative-op guard it needs (exports.mpich.guarded).
    assert sizes["avg_msg_size=any"]["is_commutative=yes"] == {
        "algorithm=MPIR_Allreduce_intra_k_reduce_scatter_allgather": {}
    }
    assert not [w for w in warnings if "segmented_ring" in w]


def test_the_model_costs_native_as_the_variant_its_counterpart_names():
    # Whatever MPICH's default tree picks is costed as the algorithm that declares it, with
    # the counterpart's parameters (MPIR_*_smp, picked at 0 B: hierarchical:inner=native).
    modelled = set()
    for collective in SPECS:
        for p, n, nodes in itertools.product((3, 4, 7, 8), (0, 8, 1 << 12, 1 << 20), (1, 2)):
            name = mpich_algorithm(collective, p, n, nodes)
            found = registry.algorithm_like(collective, "mpich", name or "")
            label = native_label(collective, p, n, nodes)
            if found is None:
                assert label is None
                continue
            algo, counterpart = found
            assert registry.parse_variant(collective, label) == algo.variant(**counterpart.params)
            modelled.add((collective, label))
    assert ("allreduce", "hierarchical:inner=native") in modelled
    assert len(modelled) >= 10
    assert native_label("bcast", 4, 1 << 20, posix=True) == "shm"
    assert native_label("reduce", 4, 8, posix=True) == "binomial"  # no POSIX counterpart


def test_every_public_module_is_found_in_name_order_subpackages_last(tmp_path, monkeypatch):
    package = tmp_path / "algos"
    for name in ("__init__", "b", "a", "_helper", "sub/__init__", "sub/c", "_hidden/__init__"):
        (package / f"{name}.py").parent.mkdir(parents=True, exist_ok=True)
        (package / f"{name}.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert registry.algorithm_modules("algos") == ["algos.a", "algos.b", "algos.sub.c"]


# An allreduce algorithm in a file of its own, as a contributor would add it.
_NEW_ALGORITHM_FILE = '''
from collectives.registry import register


@register("allreduce", "added_in_one_file", summary="an example")
def added_in_one_file(comm):
    """Bind nothing useful: only its registration is looked at."""
    return lambda send, recv, op, root: None
'''


def test_an_algorithm_file_dropped_into_the_package_is_registered(tmp_path):
    copy = tmp_path / "collectives"
    shutil.copytree(
        Path(registry.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    (copy / "allreduce_added.py").write_text(_NEW_ALGORITHM_FILE)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys; from collectives import registry; print(json.dumps("
            "[[a.name for a in registry.algorithms('allreduce')], registry.__file__,"
            " 'mpi4py.MPI' in sys.modules]))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    names, source, mpi_loaded = json.loads(done.stdout)
    assert Path(source).parent == copy and not mpi_loaded
    # Registered in file-name order: allreduce.py's algorithms, this file's, then those of
    # allreduce_allgather.py.
    at = names.index("reduce_bcast") + 1
    assert names[at : at + 2] == ["added_in_one_file", "allgather_reduce"]
    assert set(names) - {"added_in_one_file"} == {a.name for a in registry.algorithms("allreduce")}


def test_allgather_reduce_takes_the_fewest_steps_off_powers_of_two():
    alpha_only = Machine(LinkCost(1.0, 0.0, 0.0), LinkCost(1.0, 0.0, 0.0), ppn=64)
    steps = {
        name: registry.lookup("allreduce", name).cost(alpha_only, 6, 8)
        for name in ("allgather_reduce", "recursive_doubling", "rabenseifner", "reduce_bcast")
    }
    assert steps["allgather_reduce"] == 3  # ceil(lg 6): Bruck needs no fold
    assert steps["allgather_reduce"] < min(v for k, v in steps.items() if k != "allgather_reduce")
    assert registry.lookup("allreduce", "allgather_reduce").equivalents["openmpi"].id == 7
