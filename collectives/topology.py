"""Node-aware communicators for hierarchical algorithms.

Nodes come from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). To run and test the
hierarchical designs on one host, ``--ranks-per-node K`` (or the environment variable
below) emulates nodes of K consecutive ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from collectives import mpi
from collectives.errors import UsageError

if TYPE_CHECKING:
    from mpi4py import MPI

RANKS_PER_NODE_ENV = "OSU_DL_BENCH_RANKS_PER_NODE"
_emulated_ranks_per_node: int | None = None


def set_emulated_ranks_per_node(k: int | None) -> None:
    """Emulate nodes of ``k`` consecutive ranks (None: use the real shared-memory nodes)."""
    global _emulated_ranks_per_node
    if k is not None and k < 1:
        raise ValueError(f"ranks per node must be >= 1, got {k}")
    _emulated_ranks_per_node = k


def emulated_ranks_per_node() -> int | None:
    """The emulated node size in force: the setter's value, else the environment's."""
    if _emulated_ranks_per_node is not None:
        return _emulated_ranks_per_node
    value = os.environ.get(RANKS_PER_NODE_ENV, "").strip()
    if not value:
        return None
    if not (value.isdigit() and int(value) > 0):
        raise UsageError(
            f"{RANKS_PER_NODE_ENV}={value!r}: expected a whole number of "
            "ranks per node, at least 1 (or unset it)"
        )
    return int(value)


@dataclass
class NodeComms:
    """``local``: the ranks of my node; ``leaders``: local rank 0 of every node (a valid
    communicator on leaders only, COMM_NULL elsewhere); ``node``: my node's index."""

    local: MPI.Comm
    leaders: MPI.Comm
    node: int
    nodes: int

    @property
    def is_leader(self) -> bool:
        """True on the rank that represents its node among the leaders."""
        return self.local.Get_rank() == 0


def split_nodes(comm: MPI.Comm) -> NodeComms:
    """Split ``comm`` into node-local communicators and a communicator of node leaders."""
    k = emulated_ranks_per_node()
    if k:
        local = comm.Split(comm.Get_rank() // k, comm.Get_rank())
    else:
        local = comm.Split_type(mpi.COMM_TYPE_SHARED, key=comm.Get_rank())
    is_leader = local.Get_rank() == 0
    leaders = comm.Split(0 if is_leader else mpi.UNDEFINED, comm.Get_rank())
    # Every rank learns its node index from its leader's rank among the leaders.
    node = [leaders.Get_rank() if is_leader else 0]
    node = local.bcast(node[0], root=0)
    nodes = comm.allreduce(1 if is_leader else 0)
    return NodeComms(local, leaders, node, nodes)
