"""MPICH's layers as it decides them: the path a call takes through MPICH's ch4, POSIX and
MPIR trees, the candidates (the generic trees with one change each), and which of them
run the default's code in a job's shape."""

import pytest

from collectives import mpich_layers
from collectives.errors import UsageError
from collectives.mpich_layers import Call, call_path, candidate, candidate_trees, candidates
from osu_dl_bench.runtime.mpich_trees import carried_trees

BASE = carried_trees().trees
SIZES = mpich_layers.log2_sizes(8, 16 << 20)


def _identical_everywhere(collective, alg, nprocs, nodes, oversubscribed=False):
    call = Call(collective, nprocs, nodes, 8, oversubscribed=oversubscribed)
    same = mpich_layers.candidate_sizes(candidate(collective, alg), call, SIZES, BASE)
    return len(same) == len(SIZES), same


def test_the_default_on_one_node_is_the_shared_memory_layer():
    assert call_path(Call("allreduce", 2, 1, 65536), BASE) == (
        "ch4:gamma",
        "posix[world]:allreduce_release_gather",
    )
    assert call_path(Call("bcast", 2, 1, 65536), BASE) == (
        "ch4:alpha|beta|delta",
        "posix[node]:bcast_release_gather",
    )


def test_oversubscription_pins_the_posix_layer_to_mpir():
    path = call_path(Call("allreduce", 3, 1, 1 << 20, oversubscribed=True), BASE)
    assert path == ("ch4:gamma", "mpir[world]:reduce_scatter_allgather")
    everywhere, same = _identical_everywhere("allreduce", "posix_mpir", 3, 1, True)
    assert everywhere and "oversubscription" in next(iter(same.values()))


def test_on_one_node_p2_the_candidates_that_run_other_code():
    differing = {
        c.alg
        for c in candidates("allreduce")
        if not _identical_everywhere("allreduce", c.alg, 2, 1)[0]
    }
    assert differing == {"ch4_alpha", "ch4_beta", "posix_mpir"}
    differing = {
        c.alg for c in candidates("bcast") if not _identical_everywhere("bcast", c.alg, 2, 1)[0]
    }
    assert differing == {"ch4_gamma", "posix_mpir"}


def test_smp_is_a_candidate_only_where_mpir_sees_a_parent_communicator_of_several_nodes():
    everywhere, same = _identical_everywhere("allreduce", "mpir_smp", 2, 1)
    assert everywhere and "several nodes" in next(iter(same.values()))
    # on 2 nodes MPIR sees the parent communicator where ch4 hands it the whole call
    trees = candidate_trees(candidate("allreduce", "ch4_beta"), BASE)
    smp = candidate_trees(candidate("allreduce", "mpir_smp"), trees)
    assert call_path(Call("allreduce", 4, 2, 1 << 20), smp)[-1] == "mpir[world]:smp"


def test_a_candidate_changes_one_layer_and_keeps_mpichs_conditions():
    trees = candidate_trees(candidate("bcast", "ch4_alpha"), BASE)
    assert trees["posix"] == BASE["posix"] and trees["mpir"] == BASE["mpir"]
    intra = trees["ch4"]["collective=bcast"]["comm_type=intra"]
    assert list(intra) == ["comm_hierarchy=parent", "comm_hierarchy=any"]  # parent-only
    posix = candidate_trees(candidate("allreduce", "posix_mpir"), BASE)["posix"]
    assert list(posix["collective=allreduce"]) == ["comm_type=inter"]  # never matches
    assert posix["collective=bcast"] == BASE["posix"]["collective=bcast"]


def test_an_unknown_candidate_names_the_choices():
    with pytest.raises(UsageError, match="expected one of ch4_alpha, ch4_beta, ch4_gamma"):
        candidate("allreduce", "ch4_delta")


def test_on_one_node_p3_compositions_that_hand_the_call_to_the_same_mpir_code_are_the_default():
    # POSIX pinned to MPIR: allreduce's beta (netmod) and gamma (POSIX) both run MPIR on
    # the whole communicator; bcast's gamma runs binomial on world, the default on
    # node_comm, the same three ranks on one node.
    everywhere, same = _identical_everywhere("allreduce", "ch4_beta", 3, 1, True)
    assert everywhere and "under another composition: ch4:beta" in same[1 << 20]
    assert _identical_everywhere("bcast", "ch4_gamma", 3, 1, True)[0]
    differing = {
        c.alg
        for c in candidates("allreduce")
        if not _identical_everywhere("allreduce", c.alg, 3, 1, True)[0]
    }
    assert differing == {"ch4_alpha", "mpir_recursive_doubling", "mpir_ring"}
    differing = {
        c.alg
        for c in candidates("bcast")
        if not _identical_everywhere("bcast", c.alg, 3, 1, True)[0]
    }
    assert differing == {
        "mpir_scatter_recursive_doubling_allgather",
        "mpir_scatter_ring_allgather",
    }


def test_at_one_rank_per_node_the_node_roots_are_the_world():
    # 2 nodes x 1 rank: the default runs MPIR on node_roots_comm (both ranks); beta and
    # gamma hand the call to the same MPIR algorithms on the world, the same two ranks.
    assert call_path(Call("allreduce", 2, 2, 1 << 20), BASE) == (
        "ch4:alpha",
        "mpir[node_roots]:reduce_scatter_allgather",
    )
    assert _identical_everywhere("allreduce", "ch4_beta", 2, 2)[0]
    assert _identical_everywhere("bcast", "ch4_gamma", 2, 2)[0]
    differing = {
        c.alg
        for c in candidates("allreduce")
        if not _identical_everywhere("allreduce", c.alg, 2, 2)[0]
    }
    assert differing == {"mpir_recursive_doubling", "mpir_ring"}
    differing = {
        c.alg for c in candidates("bcast") if not _identical_everywhere("bcast", c.alg, 2, 2)[0]
    }
    assert differing == {
        "mpir_scatter_recursive_doubling_allgather",
        "mpir_scatter_ring_allgather",
    }
    # at 2 ranks per node node_roots_comm is not the world: beta runs other code there
    assert not _identical_everywhere("allreduce", "ch4_beta", 4, 2)[0]
