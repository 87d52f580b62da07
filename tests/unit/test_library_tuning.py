"""Tuning the MPI library itself (issue 15), without an MPI job: the library's algorithms
read through MPI_T (a singleton process, no launcher), ``native:alg=NAME`` candidates, the
environment that forces them, their isolation groups, and the exports built from them."""

import json
import os
import subprocess
import sys

import pytest

from collectives import mpit
from collectives.errors import UsageError
from collectives.registry import lookup, parse_variant

MPICH_DESCRIPTION = """Variable to select allreduce algorithm
auto - Internal algorithm selection (can be overridden with a JSON file)
nb                       - Force nonblocking algorithm
ring                     - Force ring algorithm
k_reduce_scatter_allgather - Force reduce scatter allgather algorithm"""


def test_mpich_choices_are_read_from_the_description_in_value_order():
    assert mpit.choices_from_description(MPICH_DESCRIPTION) == (
        (0, "auto"),
        (1, "nb"),
        (2, "ring"),
        (3, "k_reduce_scatter_allgather"),
    )
    assert mpit.choices_from_description("no choices here\nat all") == ()


def test_forcing_environment_names_each_librarys_variables():
    assert mpit.forcing_environment("mpich", {"allreduce": "ring", "bcast": "posix_mpir"}) == {
        "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring",
        "MPIR_CVAR_BCAST_POSIX_INTRA_ALGORITHM": "mpir",
    }
    assert mpit.forcing_environment("openmpi", {"allreduce": "ring"}) == {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_allreduce_algorithm": "ring",
    }
    with pytest.raises(UsageError, match="unknown MPI library"):
        mpit.forcing_environment("lam", {"allreduce": "ring"})


def test_library_is_told_from_its_version_text():
    assert mpit.library_of("MPICH Version:      5.0.2") == "mpich"
    assert mpit.library_of("Open MPI v5.0.8, package: Open MPI") == "openmpi"
    assert mpit.library_of("Some other MPI") is None


def test_native_keeps_its_plain_label_and_names_library_algorithms_with_alg():
    assert parse_variant("allreduce", "native").label == "native"
    assert parse_variant("allreduce", "native:alg=auto").label == "native"
    forced = parse_variant("bcast", "native:alg=binomial")
    assert forced.label == "native:alg=binomial" and dict(forced.params) == {"alg": "binomial"}
    assert lookup("allreduce", "native").grid_variants()[0].label == "native"
    with pytest.raises(UsageError, match="expected a library algorithm's name"):
        parse_variant("allreduce", "native:alg=Ring;rm")
    # Collectives without library algorithms keep a native without parameters.
    with pytest.raises(UsageError, match="has no parameter alg"):
        parse_variant("reduce", "native:alg=binomial")


# Run in a fresh singleton process (no launcher): MPI_T of the library mpi4py loaded.
_READ_LIBRARY = """
import json
from collectives import mpit
from collectives.registry import parse_variant
from mpi4py import MPI
out = {"library": mpit.running_library(),
       "allreduce": [a.alg for a in mpit.library_algorithms("allreduce")],
       "bcast": [a.alg for a in mpit.library_algorithms("bcast")],
       "now": mpit.current_choice("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM")}
try:
    parse_variant("allreduce", "native:alg=ring").bind(MPI.COMM_WORLD)
    out["refused"] = None
except Exception as exc:
    out["refused"] = str(exc)
print(json.dumps(out))
"""


def _singleton(code: str, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_mpich_algorithms_are_enumerated_from_the_running_library():
    seen = _singleton(_READ_LIBRARY)
    if seen["library"] != "mpich":
        pytest.skip(f"the MPI library here is {seen['library']}, not MPICH")
    assert {"ring", "recursive_doubling", "reduce_scatter_allgather", "tree"} <= set(
        seen["allreduce"]
    )
    assert {"posix_mpir", "posix_release_gather"} <= set(seen["allreduce"])
    assert {"binomial", "scatter_ring_allgather", "pipelined_tree"} <= set(seen["bcast"])
    assert "auto" not in seen["allreduce"] and seen["now"] == "auto"
    assert "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring" in seen["refused"]


def test_a_forced_algorithm_binds_where_its_variable_was_set_at_launch():
    seen = _singleton(_READ_LIBRARY, MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM="ring")
    if seen["library"] != "mpich":
        pytest.skip(f"the MPI library here is {seen['library']}, not MPICH")
    assert seen["now"] == "ring" and seen["refused"] is None


def _plan(collective, labels):
    from collectives.specs import SPECS
    from osu_dl_bench.jobs.plan import CollectivePlan

    variants = [parse_variant(collective, label) for label in labels]
    return CollectivePlan(SPECS[collective], [1, 2], variants, [], 2, 1, 2)


def test_each_forced_library_algorithm_is_an_isolation_group_without_plain_native():
    from osu_dl_bench.jobs.plan import forced_in, group_of, in_group, isolation_groups

    plans = [
        _plan("allreduce", ["native", "ring", "native:alg=ring", "native:alg=tree"]),
        _plan("bcast", ["native", "native:alg=tree"]),
    ]
    assert isolation_groups(plans) == ["mpi", "alg_ring", "alg_tree"]
    native, ring, forced_ring, _ = plans[0].eligible
    assert group_of(forced_ring) == "alg_ring" and group_of(native) == "mpi"
    # Plain native runs in the MPI group (and beside other backends), never in a forced
    # group, where it would be the forced algorithm under native's name.
    assert in_group(native, "mpi") and in_group(native, "gloo")
    assert not in_group(native, "alg_ring") and not in_group(ring, "alg_ring")
    assert in_group(forced_ring, "alg_ring") and not in_group(forced_ring, "mpi")
    tree_group = [
        _plan(p.spec.name, [v.label for v in p.eligible if in_group(v, "alg_tree")]) for p in plans
    ]
    assert forced_in(tree_group) == {"allreduce": "tree", "bcast": "tree"}
