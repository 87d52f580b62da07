"""The algorithm catalog is data: names, parameters, requirements, costs and library
counterparts are read without starting MPI, and the commands derive their lists from it."""

import argparse
import json
import subprocess
import sys

import pytest

from collectives import registry
from collectives.specs import SPECS
from osu_dl_bench.jobs.options import parse_collectives
from osu_dl_bench.measurement import options as bench_options
from osu_dl_bench.measurement import report
from osu_dl_bench.measurement.options import add_bench_arguments, config_from_args

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
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


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
from osu_dl_bench.runtime import init_mpi
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
    assert listed == [[a.collective, a.name] for a in registry.all_algorithms()]


def _bench_config(benchmark: str):
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    return config_from_args(parser.parse_args([benchmark]))


def test_bench_and_sweep_offer_the_collectives_the_specs_describe():
    offered = bench_options.BENCHMARKS
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
