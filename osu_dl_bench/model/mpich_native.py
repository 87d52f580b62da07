"""What ``native`` runs: the algorithm MPICH's default selection picks, as a registered
variant, so native is costed with that algorithm's formula.

The tree is MPICH's own (selection.exports.mpich_default, MPICH 5.0.2's compiled-in
generic.json), walked with the call's comm size, message size, count and op. An MPIR name
maps to the registered algorithm that declares it as its MPICH counterpart
(``Algorithm.equivalents["mpich"]``), with the parameters under which both run the same
schedule; ``MPIR_*_smp`` (node-aware) is ``hierarchical:inner=native``. Names no algorithm
declares (Reduce's reduce-scatter + gather, Reduce-scatter's recursive doubling and
non-commutative variants) leave native unmodelled (None).

On one node MPICH's ch4 device answers allreduce and bcast before this tree, with its
POSIX shared-memory "release_gather" collectives (src/mpid/ch4/shm/posix/
posix_coll_release_gather.h and release_gather.c). They move the message through small
shared cells, one cell at a time: the cells are MPIR_CVAR_{BCAST,REDUCE}_INTRANODE_BUFFER_
TOTAL_SIZE (32768) / _NUM_CELLS (4) = 8 KiB by default, and ranks hand cells on by flags
along k-ary trees (MPIR_CVAR_REDUCE_INTRANODE_TREE_KVAL = 4, MPIR_CVAR_BCAST_INTRANODE_TREE_
KVAL = 64). Costs, k = ceil(n / 8 KiB) cells, w = one wave of flags across one tree level,
d_r and d_b the depths of the reduce and bcast trees:

- allreduce: per cell a gather (every rank copies its part into its reduce cell; each
  parent reduces its children's cells into its own, up the 4-ary tree) and then a release
  (rank 0's cell is copied out by every rank), one after the other:
  k (d_r + d_b) w + 2 n beta + d_r min(4, p-1) n gamma_native;
- bcast: the root copies cell g+1 in while the others copy cell g out (the cells are
  reused in turn), one release wave per cell: k d_b w + (n + 8 KiB) beta.

w is measured: MPI_Barrier on one node is the same machinery, one gather and one release
wave (barrier_s of the platform's contention state); without it, the link's alpha.
Oversubscribed runs turn that path off (runtime.launcher.OVERSUBSCRIBED_CVARS sets the POSIX
algorithms to ``mpir``) and reach the tree.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from collectives.common import (
    LinkCost,
)
from collectives.mpich_layers import search
from collectives.registry import algorithm_like, format_params

# Our collective -> MPICH's tree; reduce_scatter is MPI_Reduce_scatter_block here.
_TREE_NAMES = {"reduce_scatter": "reduce_scatter_block"}
# Collectives whose per-rank message is one block of a p-block buffer.
_TOTAL_IS_P_BLOCKS = {"allgather", "reduce_scatter"}


@lru_cache(maxsize=1)
def _tree() -> dict[str, Any]:
    from osu_dl_bench.selection.exports.mpich_default import default_tree

    return default_tree()


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
    return search(tree, facts)


# ch4's POSIX algorithm that answers allreduce and bcast first on one node (not
# oversubscribed): MPIR_CVAR_{ALLREDUCE,BCAST}_POSIX_INTRA_ALGORITHM=auto picks it.
POSIX_ALGORITHM = "release_gather"
# MPICH's defaults for release_gather (module docstring).
CELL_BYTES = 32768 // 4
REDUCE_KVAL, BCAST_KVAL = 4, 64


def kary_depth(p: int, k: int) -> int:
    """Levels below the root of a k-ary tree of p ranks."""
    depth, reached, width = 0, 1, 1
    while reached < p:
        width *= k
        reached += width
        depth += 1
    return depth


def flag_wave(barrier_s: float, p: int) -> float:
    """One wave of flags across one tree level, from a barrier of p ranks (its gather up
    the reduce tree and release down the bcast tree)."""
    return barrier_s / max(1, kary_depth(p, REDUCE_KVAL) + kary_depth(p, BCAST_KVAL))


def release_gather_seconds(collective: str, link: LinkCost, wave: float, p: int, n: int):
    """MPICH's POSIX release_gather allreduce or bcast on one node (module docstring), or
    None for other collectives."""
    if collective not in ("allreduce", "bcast"):
        return None
    if p <= 1:
        return 0.0
    cells = max(1, math.ceil(n / CELL_BYTES))
    up, down = kary_depth(p, REDUCE_KVAL), kary_depth(p, BCAST_KVAL)
    if collective == "bcast":
        return cells * down * wave + (n + min(n, CELL_BYTES)) * link.beta
    reduce = up * min(REDUCE_KVAL, p - 1) * n * link.gamma
    return cells * (up + down) * wave + 2 * n * link.beta + reduce


def _our_label(collective: str, library: str, name: str | None) -> str | None:
    """The label of our variant that runs what ``library``'s algorithm ``name`` runs."""
    found = algorithm_like(collective, library, name) if name else None
    if found is None:
        return None
    algo, counterpart = found
    params = format_params(counterpart.params)
    return f"{algo.name}:{params}" if params else algo.name


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
    if posix and nodes == 1 and nprocs > 1:
        ours = _our_label(collective, "mpich_posix", POSIX_ALGORITHM)
        if ours is not None:
            return ours
    name = mpich_algorithm(collective, nprocs, nbytes, nodes, itemsize)
    return _our_label(collective, "mpich", name)
