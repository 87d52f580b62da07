"""Tuning the MPI library itself, without an MPI job: the library's algorithms
read through MPI_T (a singleton process, no launcher), ``native:alg=NAME`` candidates, the
environment that forces them, their isolation groups, and the exports built from them."""

import os

import pytest
from support.interpreter import python_json
from support.mpich_layers import layered_run

from collectives import mpit
from collectives.errors import UsageError
from collectives.registry import lookup, parse_variant
from collectives.shape import JobShape
from osu_dl_bench.selection.table import TuningTable

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


# Run in a fresh singleton process (no launcher): the library mpi4py loaded.
_READ_LIBRARY = """
import json
from collectives import mpit
from collectives.registry import parse_variant
from mpi4py import MPI
out = {"library": mpit.running_library(),
       "allreduce": [a.alg for a in mpit.library_algorithms("allreduce") if not a.legacy],
       "bcast": [a.alg for a in mpit.library_algorithms("bcast") if not a.legacy],
       "legacy": [a.alg for a in mpit.library_algorithms("allreduce") if a.legacy]}
from osu_dl_bench.commands.listing import library_lines
out["listing"] = library_lines("allreduce")
try:
    parse_variant("allreduce", "native:alg=ch4_beta").bind(MPI.COMM_WORLD)
    out["refused"] = None
except Exception as exc:
    out["refused"] = str(exc)
print(json.dumps(out))
"""


def _singleton(code: str, **env: str) -> dict:
    return python_json(code, env={**os.environ, **env})


def test_mpich_candidates_are_its_layers_choices():
    seen = _singleton(_READ_LIBRARY)
    if seen["library"] != "mpich":
        pytest.skip(f"the MPI library here is {seen['library']}, not MPICH")
    assert {"ch4_alpha", "ch4_beta", "ch4_gamma", "posix_mpir", "mpir_ring"} <= set(
        seen["allreduce"]
    )
    assert "ch4_delta" not in seen["allreduce"]  # not a name MPICH's ch4 tree accepts
    assert {"ch4_delta", "mpir_binomial", "mpir_scatter_ring_allgather"} <= set(seen["bcast"])
    # MPICH's CVAR-forced algorithms stay for verify-export's forced runs, apart
    assert "ring" not in seen["allreduce"] and "ring" in seen["legacy"]
    assert "loads its MPICH selection files" in seen["refused"]
    assert seen["listing"] == [
        "native:alg=NAME of allreduce: MPICH's candidates layer by layer: "
        "osu-dl-bench list allreduce --library mpich --np P [--nodes N]"
    ]


def test_a_candidate_binds_where_its_selection_files_are_loaded(tmp_path):
    from osu_dl_bench.runtime.mpich_trees import candidate_files_env

    env = candidate_files_env(tmp_path, {"allreduce": "ch4_beta"})
    seen = _singleton(_READ_LIBRARY, **env)
    if seen["library"] != "mpich":
        pytest.skip(f"the MPI library here is {seen['library']}, not MPICH")
    assert seen["refused"] is None


def _plan(collective, labels):
    from collectives.specs import SPECS
    from osu_dl_bench.jobs.plan import CollectivePlan

    variants = [parse_variant(collective, label) for label in labels]
    return CollectivePlan(SPECS[collective], [1, 2], variants, [], JobShape(2, 1, 2))


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


# --- tune and exports from the library's own algorithms ----------------------------------


def _leaves(tree):
    """The subtrees under avg_msg_size keys of MPICH's comm_type=intra branch."""
    return {size_key: sub for comm in tree.values() for size_key, sub in comm.items()}


def test_the_library_file_takes_what_beat_the_default_with_confidence(tmp_path):
    from osu_dl_bench.selection.exports import mpich, openmpi
    from osu_dl_bench.selection.exports.mpich_default import default_tree
    from osu_dl_bench.selection.tune import build_table

    plan = {
        size: {
            "ring:seg=256K": 0.6,
            "native:alg=ring": 1.2 if size < 65536 else 0.5,
            "native:alg=recursive_doubling": 1.3,
        }
        for size in (1024, 4096, 65536, 1 << 20)
    }
    table, _ = build_table(layered_run(tmp_path / "run", plan), "lib")
    # The runtime's table never names an algorithm only a launch can force.
    chosen = {r.choice.label for e in table.entries for r in e.ranges}
    assert chosen == {"ring:seg=256K"}
    library = table.header["library_tuning"]
    assert library["library"] == "mpich"
    ranges = library["entries"][0]["ranges"]
    assert [(r["min_bytes"], r["max_bytes"], r["alg"]) for r in ranges] == [
        (0, 65536, "auto"),
        (65536, None, "ring"),
    ]
    assert ranges[1]["points"][0]["ratio_high"] < 1 and ranges[1]["points"][0]["launches"] == 3

    warn = []
    leaves = _leaves(mpich.document(table, warn)["collective=allreduce"]["comm_type=intra"])
    default_intra = default_tree()["collective=allreduce"]["comm_type=intra"]
    assert leaves == {
        "avg_msg_size<=65535": default_intra,
        "avg_msg_size=any": {
            "is_commutative=yes": {"algorithm=MPIR_Allreduce_intra_ring": {}},
            "is_commutative=no": default_intra,
        },
    }
    files, _ = mpich.export(table, tmp_path / "lib")
    notes = files[-1].read_text()
    assert "ring: 2 sizes measured (64K-1M), 3 launches" in notes
    # An MPICH sweep's library algorithms are MPICH's: Open MPI's file still translates
    # the table's own choices; a sweep of Open MPI's algorithms writes those.
    assert "0            4 0 0   # [0, inf): ring:seg=256K" in openmpi.classic_text(table, [])
    as_openmpi = TuningTable(
        table.entries, {**table.header, "library_tuning": {**library, "library": "openmpi"}}
    )
    rules = openmpi.classic_text(as_openmpi, [])
    assert "0            0 0 0   # [0, 64K): auto" in rules
    assert "65536        4 0 0   # [64K, inf): ring: 2 sizes measured" in rules


def test_where_the_default_wins_the_library_file_keeps_the_default(tmp_path):
    from osu_dl_bench.selection.exports import mpich, openmpi
    from osu_dl_bench.selection.exports.mpich_default import default_tree
    from osu_dl_bench.selection.tune import build_table

    plan = {size: {"native:alg=ring": 1.0, "native:alg=tree": 1.4} for size in (1024, 65536)}
    table, _ = build_table(layered_run(tmp_path / "run", plan), "lib")
    ranges = table.header["library_tuning"]["entries"][0]["ranges"]
    assert [r["alg"] for r in ranges] == ["auto"]
    warn = []
    leaves = _leaves(mpich.document(table, warn)["collective=allreduce"]["comm_type=intra"])
    assert leaves == {"avg_msg_size=any": default_tree()["collective=allreduce"]["comm_type=intra"]}
    assert not warn
    library = {**table.header["library_tuning"], "library": "openmpi"}
    rules = openmpi.classic_text(
        TuningTable(table.entries, {**table.header, "library_tuning": library}), []
    )
    assert "0            0 0 0   # [0, inf): auto: 2 sizes measured" in rules


# --- verify-export -------------------------------------------------------------------------


def _ring_file_tree():
    from osu_dl_bench.selection.exports.mpich_default import default_tree

    tree = default_tree()
    default = tree["collective=allreduce"]["comm_type=intra"]
    tree["collective=allreduce"]["comm_type=intra"] = {
        "comm_size<=3": {
            "avg_msg_size<=65535": default,
            "avg_msg_size=any": {"algorithm=MPIR_Allreduce_intra_ring": {}},
        },
        "comm_size=any": {"avg_msg_size=any": {"algorithm=MPIR_Allreduce_allcomm_nb": {}}},
    }
    return tree


def test_the_algorithm_an_mpich_file_names_is_read_back_per_size_and_comm_size():
    from osu_dl_bench.selection.exports.mpich import file_algorithm

    tree = _ring_file_tree()
    assert file_algorithm(tree, "allreduce", 2, 65535) is None  # MPICH's default there
    assert file_algorithm(tree, "allreduce", 2, 65536) == "ring"
    assert file_algorithm(tree, "allreduce", 4, 8) == "nb"
    assert file_algorithm(tree, "bcast", 2, 65536) is None


def _launches(**groups):
    """metadata jobs for p=2, one launch: group -> fingerprints {size text: hashes}."""
    return {"jobs": {"2": {"launches": {f"1/{g}": {"fingerprints": f} for g, f in groups.items()}}}}


def test_verify_export_proves_the_file_by_fingerprints_and_catches_an_ignored_file():
    from osu_dl_bench.commands.verify_export import mismatch_text, proof_lines
    from osu_dl_bench.selection.exports.mpich import file_algorithm
    from osu_dl_bench.selection.exports.verification import prove

    file = _ring_file_tree()

    def tree(collective, nprocs, size):
        return file_algorithm(file, collective, nprocs, size)

    default = {"1024": [1, 2], "65536": [3, 4]}
    ring = {"1024": [5, 5], "65536": [6, 6]}
    took = prove(
        _launches(mpi=default, alg_ring=ring, library_file={"1024": [1, 2], "65536": [6, 6]}),
        tree,
        1,
    )
    assert (took.checked, took.distinguishable, took.mismatches) == (2, 1, ())
    assert "took effect" in proof_lines(took, "mpich")[0]
    ignored = prove(_launches(mpi=default, alg_ring=ring, library_file=default), tree, 1)
    assert [mismatch_text(m) for m in ignored.mismatches] == ["p=2 launch 1 64K: expected ring's"]
    assert "did NOT take effect" in proof_lines(ignored, "mpich")[0]


def test_the_algorithm_an_open_mpi_rules_file_names_is_read_back(tmp_path):
    from osu_dl_bench.selection.exports.openmpi import rules_algorithm

    text = (
        "2 # collectives\n2 # allreduce\n2 # comm sizes\n1\n2\n0 0 0 0\n65536 4 0 0 # ring\n"
        "3\n1\n0 3 0 0 # recursive doubling\n7 # bcast\n1\n1\n1\n0 6 0 0\n"
    )
    assert rules_algorithm(text, "allreduce", 2, 1024) is None  # 0: Open MPI decides
    assert rules_algorithm(text, "allreduce", 2, 1 << 20) == "ring"
    assert rules_algorithm(text, "allreduce", 4, 8) == "recursive_doubling"
    assert rules_algorithm(text, "bcast", 2, 8) == "binomial"


def test_the_library_version_line_drops_the_nul_open_mpi_ends_its_text_with():
    from types import SimpleNamespace

    from osu_dl_bench.runtime.metadata import library_version_line

    text = "Open MPI v5.0.11, package: Open MPI, Sep 16, 2026\x00"
    mpi = SimpleNamespace(Get_library_version=lambda: text)
    assert library_version_line(mpi) == "Open MPI v5.0.11, package: Open MPI, Sep 16, 2026"
    mpich = SimpleNamespace(
        Get_library_version=lambda: "MPICH Version:\t5.0.2\nMPICH Release date: x\n"
    )
    assert library_version_line(mpich) == "MPICH Version: 5.0.2"
