"""What ``native`` runs: the algorithm MPICH's default selection picks, as a registered
variant, so native is costed with that algorithm's formula.

The tree is MPICH's own (tuning.exports.mpich_default, MPICH 5.0.2's compiled-in
generic.json), walked with the call's comm size, message size, count and op. MPIR names
map to the registered algorithm of the same design; ``MPIR_*_smp`` (node-aware) maps to
``hierarchical``. Names with no registered counterpart (Reduce's reduce-scatter + gather,
Reduce-scatter's recursive doubling and non-commutative variants) leave native unmodelled
(None).

On one node MPICH's ch4 device answers allreduce and bcast before this tree, with its
POSIX shared-memory "release_gather" collectives: a reduce to the root then a broadcast
through shared cells (allreduce), the root writing into shared cells that the others read
(bcast). Their registered twins are ``reduce_bcast`` and ``shm``. Oversubscribed runs turn
that path off (runtime.OVERSUBSCRIBED_CVARS sets the POSIX algorithms to ``mpir``) and
reach the tree.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from osu_dl_bench.collectives.common import is_power_of_two, largest_power_of_two_at_most

# MPIR algorithm -> our variant label, per collective.
MPIR_TO_OURS = {
    "MPIR_Allreduce_intra_recursive_doubling": "recursive_doubling",
    "MPIR_Allreduce_intra_reduce_scatter_allgather": "rabenseifner",
    "MPIR_Allreduce_intra_ring": "ring:seg=0",
    "MPIR_Allreduce_intra_smp": "hierarchical:inner=native",
    "MPIR_Bcast_intra_binomial": "binomial",
    "MPIR_Bcast_intra_scatter_recursive_doubling_allgather": "scatter_rd_allgather",
    "MPIR_Bcast_intra_scatter_ring_allgather": "scatter_ring_allgather",
    "MPIR_Bcast_intra_smp": "hierarchical:inner=native",
    "MPIR_Reduce_intra_binomial": "binomial",
    "MPIR_Allgather_intra_ring": "ring",
    "MPIR_Allgather_intra_recursive_doubling": "recursive_doubling",
    "MPIR_Allgather_intra_brucks": "bruck",
    "MPIR_Reduce_scatter_block_intra_recursive_halving": "recursive_halving",
    "MPIR_Reduce_scatter_block_intra_pairwise": "ring",
}
# Our collective -> MPICH's tree; reduce_scatter is MPI_Reduce_scatter_block here.
_TREE_NAMES = {"reduce_scatter": "reduce_scatter_block"}
# Collectives whose per-rank message is one block of a p-block buffer.
_TOTAL_IS_P_BLOCKS = {"allgather", "reduce_scatter"}
_CONDITION = re.compile(r"^(\w+?)(<=|<|=)(.+)$")


@lru_cache(maxsize=1)
def _tree() -> dict[str, Any]:
    from osu_dl_bench.tuning.exports.mpich_default import default_tree

    return default_tree()


def _holds(key: str, facts: dict[str, Any]) -> bool:
    match = _CONDITION.match(key)
    if not match:
        return False
    name, relation, value = match.groups()
    if value == "any":
        return True
    fact = facts.get(name)
    if fact is None:
        return False
    if value == "pow2":
        limit = largest_power_of_two_at_most(max(facts["comm_size"], 1))
        return is_power_of_two(fact) if relation == "=" else fact < limit
    if relation == "=":
        return str(fact) == value
    return fact <= int(value) if relation == "<=" else fact < int(value)


def _walk(node: dict[str, Any], facts: dict[str, Any]) -> str | None:
    """The first branch (in MPICH's order) whose condition holds, down to an algorithm."""
    for key, child in node.items():
        if key.startswith("algorithm="):
            return key.split("=", 1)[1]
        if _holds(key, facts):
            return _walk(child, facts)
    return None


def mpich_algorithm(
    collective: str, nprocs: int, nbytes: int, nodes: int = 1, itemsize: int = 4
) -> str | None:
    """The MPIR algorithm MPICH's default tree picks (commutative built-in op)."""
    tree = _tree().get(f"collective={_TREE_NAMES.get(collective, collective)}")
    if tree is None:
        return None
    total = nbytes * nprocs if collective in _TOTAL_IS_P_BLOCKS else nbytes
    facts = {
        "comm_type": "intra",
        "comm_size": nprocs,
        "avg_msg_size": nbytes,
        "total_msg_size": total,
        "count": nbytes // itemsize,
        "is_commutative": "yes",
        "is_op_built_in": "yes",
        "is_block_regular": "yes",
        "comm_hierarchy": "parent" if nodes > 1 else "flat",
    }
    return _walk(tree, facts)


# ch4 POSIX release_gather -> our variant of the same design (one node, not oversubscribed).
POSIX_TO_OURS = {"allreduce": "reduce_bcast", "bcast": "shm"}


def native_label(
    collective: str,
    nprocs: int,
    nbytes: int,
    nodes: int = 1,
    itemsize: int = 4,
    posix: bool = False,
) -> str | None:
    """Our variant label for what native runs, or None if it has no registered twin;
    ``posix``: one node where MPICH's shared-memory collectives answer first."""
    if posix and nodes == 1 and collective in POSIX_TO_OURS and nprocs > 1:
        return POSIX_TO_OURS[collective]
    name = mpich_algorithm(collective, nprocs, nbytes, nodes, itemsize)
    return MPIR_TO_OURS.get(name or "")
