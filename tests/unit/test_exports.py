"""Exports to Open MPI and MPICH: their content, and loading them in the real libraries.

A library reading a file is not enough: Open MPI ignores a bad rules file silently (and the
5.0 wheel compiles out the reader's messages), MPICH's csel may parse keys it does not
understand. So the tests prove the rules are applied: a user-defined reduction that is
declared commutative but is not ("a*31 + b*7 + 1") makes every allreduce algorithm leave
its own fingerprint in the result. A run with the exported file must match, size by size,
the runs that force the algorithm the table chose; a broken file must not.
"""

import json

import pytest
from support.exports import export_files
from support.tuning import (
    make_entry,
    make_table,
)

from osu_dl_bench.selection import Query, Selector
from osu_dl_bench.selection.exports.common import comm_bounds
from osu_dl_bench.selection.exports.mpich_default import default_tree

pytestmark = pytest.mark.usefixtures("registered")


def _numbers(text):
    """The numbers of a classic rules file, comments dropped."""
    return [int(tok) for line in text.splitlines() for tok in line.split("#")[0].split()]


def _classic(numbers):
    """Parse the classic format into {collective id: [(comm size, [(msg, alg, fan, seg)])]}."""
    it = iter(numbers)
    out = {}
    for _ in range(next(it)):
        coll = next(it)
        sizes = []
        for _ in range(next(it)):
            comm = next(it)
            rows = [tuple(next(it) for _ in range(4)) for _ in range(next(it))]
            sizes.append((comm, rows))
        out[coll] = sizes
    assert next(it, None) is None
    return out


def test_openmpi_classic_rules_content(winning_table, tmp_path):
    files, warnings = export_files(winning_table, tmp_path, "openmpi")
    text = files["exp.openmpi.rules"].read_text()
    rules = _classic(_numbers(text))
    assert sorted(rules) == [2, 7]
    allreduce = dict(rules[2])
    assert sorted(allreduce) == [1, 3, 4]  # p=2 serves 1..2, p=3 serves 3, p=4 serves 4..
    assert allreduce[4] == [(0, 0, 0, 0), (4096, 4, 0, 0), (1 << 20, 2, 0, 0)]
    assert allreduce[3] == [(0, 0, 0, 0)]  # hierarchical has no Open MPI id: Open MPI decides
    assert dict(rules[7])[4] == [(0, 6, 0, 0), (8192, 2, 1, 65536)]  # chain: fan-out 1, seg
    assert all(rows[0][0] == 0 for sizes in rules.values() for _, rows in sizes)
    assert any("hierarchical" in w and "no Open MPI equivalent" in w for w in warnings)
    assert "# not exported: allreduce on cpu, p=3" in text


def test_openmpi_json_content(winning_table, tmp_path):
    files, _ = export_files(winning_table, tmp_path, "openmpi")
    doc = json.loads(files["exp.openmpi.json"].read_text())
    assert (doc["rule_file_version"], doc["module"]) == (3, "tuned")
    p4 = doc["collectives"]["allreduce"][-1]
    assert p4["comm_size_min"] == 4 and "comm_size_max" not in p4
    assert p4["rules"] == [
        {"msg_size_min": 0, "msg_size_max": 4095, "alg": "ignore"},
        {"msg_size_min": 4096, "msg_size_max": (1 << 20) - 1, "alg": "ring"},
        {"msg_size_min": 1 << 20, "alg": "nonoverlapping"},
    ]
    first = doc["collectives"]["bcast"][0]
    assert (first["comm_size_min"], first["comm_size_max"]) == (1, 3)
    assert first["rules"][1] == {
        "msg_size_min": 8192,
        "alg": "chain",
        "faninout": 1,
        "seg_size": 65536,
    }


def _ends_in_any(tree):
    """Every comm_size / avg_msg_size level of our subtrees ends with an =any key."""
    for key, sub in tree.items():
        if key.startswith(("comm_size", "avg_msg_size")):
            assert list(tree)[-1].endswith("=any"), list(tree)
        if isinstance(sub, dict):
            _ends_in_any(sub)


def test_mpich_json_content(winning_table, tmp_path):
    files, warnings = export_files(winning_table, tmp_path, "mpich")
    doc = json.loads(files["exp.mpich.mpir.json"].read_text())
    default = default_tree()
    assert list(doc) == list(default)  # every collective MPICH may need, in its order
    assert {k: v for k, v in doc.items() if k not in _OURS} == {
        k: v for k, v in default.items() if k not in _OURS
    }
    intra = doc["collective=allreduce"]["comm_type=intra"]
    assert list(intra) == ["comm_size<=2", "comm_size<=3", "comm_size=any"]
    p4 = intra["comm_size=any"]
    assert list(p4) == ["avg_msg_size<=4095", "avg_msg_size<=1048575", "avg_msg_size=any"]
    native = default["collective=allreduce"]["comm_type=intra"]
    assert p4["avg_msg_size<=4095"] == native  # native: MPICH's own decision
    # MPICH's ring needs a commutative op: a non-commutative one keeps MPICH's decision.
    assert p4["avg_msg_size<=1048575"] == {
        "is_commutative=yes": {"algorithm=MPIR_Allreduce_intra_ring": {}},
        "is_commutative=no": native,
    }
    assert p4["avg_msg_size=any"] == native  # reduce_bcast: MPICH has none
    assert intra["comm_size<=3"] == {"avg_msg_size=any": native}
    bcast = doc["collective=bcast"]["comm_type=intra"]["comm_size=any"]
    assert bcast["avg_msg_size<=8191"] == {"algorithm=MPIR_Bcast_intra_binomial": {}}
    _ends_in_any(doc["collective=allreduce"])
    _ends_in_any(doc["collective=bcast"])
    assert any("reduce_bcast" in w and "no MPICH equivalent" in w for w in warnings)


_OURS = ("collective=allreduce", "collective=bcast")


def test_mpich_choices_keep_the_default_where_mpich_cannot_run_them():
    """reduce_scatter_allgather asserts a built-in op (a user-defined op aborted MPICH
    5.0.2 under an unguarded file) and needs count >= pof2; recursive doubling runs any
    op; a bcast choice needs no condition; the verifier reads through the guards."""
    from osu_dl_bench.selection.exports.mpich import file_algorithm, guarded

    default = {"algorithm=MPIR_Allreduce_intra_recursive_doubling": {}}
    rsag = guarded("allreduce", "MPIR_Allreduce_intra_reduce_scatter_allgather", default)
    assert rsag["is_commutative=no"] == default
    built_in = rsag["is_commutative=yes"]
    assert built_in["is_op_built_in=no"] == default
    assert built_in["is_op_built_in=yes"] == {
        "count<pow2": default,
        "count=any": {"algorithm=MPIR_Allreduce_intra_reduce_scatter_allgather": {}},
    }
    any_op = "MPIR_Allreduce_intra_recursive_doubling"
    assert guarded("allreduce", any_op, default) == {f"algorithm={any_op}": {}}
    srag = "MPIR_Bcast_intra_scatter_ring_allgather"
    assert guarded("bcast", srag, default) == {f"algorithm={srag}": {}}
    tree = {
        "collective=allreduce": {"comm_type=intra": {"comm_size=any": {"avg_msg_size=any": rsag}}}
    }
    assert file_algorithm(tree, "allreduce", 4, 1 << 20) == "reduce_scatter_allgather"


def test_mpich_smp_choices_apply_to_the_parent_communicator_only():
    """The node-aware algorithms call the collective again on their node communicators:
    named for every communicator, MPICH 5.0.2 aborted in the nested call
    (bcast_intra_smp.c: MPIR_Comm_is_parent_comm), so the file names them under
    comm_hierarchy=parent, first, and keeps the default for the rest."""
    from osu_dl_bench.selection.exports.mpich import file_algorithm, guarded

    default = {"algorithm=MPIR_Bcast_intra_binomial": {}}
    smp = guarded("bcast", "MPIR_Bcast_intra_smp", default)
    assert list(smp) == ["comm_hierarchy=parent", "comm_hierarchy=any"]
    assert smp["comm_hierarchy=parent"] == {"algorithm=MPIR_Bcast_intra_smp": {}}
    assert smp["comm_hierarchy=any"] == default
    reduce_smp = guarded("allreduce", "MPIR_Allreduce_intra_smp", default)
    assert reduce_smp["comm_hierarchy=parent"]["is_commutative=no"] == default
    tree = {"collective=bcast": {"comm_type=intra": {"comm_size=any": {"avg_msg_size=any": smp}}}}
    assert file_algorithm(tree, "bcast", 2, 1 << 20) == "smp"


@pytest.mark.parametrize("sizes", [[2], [2, 3, 4], [2, 8], [1, 4, 16, 64], [3, 5, 6, 12]], ids=str)
def test_export_comm_bounds_agree_with_the_selectors_nearest_entry(sizes):
    selector = Selector(make_table(*(make_entry(p, [(0, "native")]) for p in sizes)), force={})
    bounds = comm_bounds(sizes)
    assert bounds[0].lo == 1 and bounds[-1].hi is None
    for p in range(1, 2 * max(sizes) + 2):
        (served,) = [b.nprocs for b in bounds if b.lo <= p and (b.hi is None or p <= b.hi)]
        assert served == selector.decide(Query("allreduce", p, 64)).entry.key.nprocs, p


def test_provenance_comment_lines_carry_no_control_characters():
    from types import SimpleNamespace

    from osu_dl_bench.selection.exports.common import provenance_lines

    run = {"mpi_library": "Open MPI v5.0.11\x00", "hosts": ["vm"], "date": "d\n# injected"}
    table = SimpleNamespace(header={"name": "t", "provenance": {"run": run, "run_dir": "r\x1b[2J"}})
    lines = provenance_lines(table)
    assert all("\x00" not in ln and "\n" not in ln and "\x1b" not in ln for ln in lines)
    assert "measured with: Open MPI v5.0.11 on vm, d # injected" in lines


def test_mpich_keys_one_node_and_several_node_entries_apart():
    """A table measured on one node and on several: MPICH's csel key for a communicator
    within one node (comm_size=node_comm_size) takes the one-node entries, the keys after
    it the several-node ones; a table of one node only is written as before."""
    from osu_dl_bench.selection.exports.mpich import ONE_NODE_KEY, document, file_algorithm

    one = make_entry(4, [(0, "native"), (65536, "ring")])
    several = make_entry(4, [(0, "native"), (65536, "recursive_doubling")], nodes=2, ppn=2)
    tree = document(make_table(one, several), [])
    intra = tree["collective=allreduce"]["comm_type=intra"]
    assert next(iter(intra)) == ONE_NODE_KEY and list(intra)[-1] == "comm_size=any"
    assert file_algorithm(tree, "allreduce", 4, 1 << 20, nodes=1) == "ring"
    assert file_algorithm(tree, "allreduce", 4, 1 << 20, nodes=2) == "recursive_doubling"
    only_several = document(make_table(several), [])["collective=allreduce"]["comm_type=intra"]
    assert only_several[ONE_NODE_KEY] == default_tree()["collective=allreduce"]["comm_type=intra"]
    only_one = document(make_table(one), [])["collective=allreduce"]["comm_type=intra"]
    assert ONE_NODE_KEY not in only_one
