"""Where the ranks of a communicator live: nodes, ranks per node, host names; real nodes
from MPI_Comm_split_type(SHARED), or emulated ones on one host."""

from __future__ import annotations

from dataclasses import dataclass

from collectives.shape import JobShape
from osu_dl_bench.runtime.rank_agreement import agree_on_errors


@dataclass(frozen=True)
class Topology:
    """Where the ranks of a communicator live: nodes, ranks per node, host names."""

    nprocs: int
    nodes: int
    ppn: int
    hostnames: tuple[str, ...]
    emulated: bool = False
    # Each rank's node, in rank order: its host name (on emulated nodes, the node's index).
    rank_nodes: tuple[str, ...] = ()

    @property
    def shape(self) -> JobShape:
        """The job's shape (ranks, nodes, ranks per node)."""
        return JobShape(self.nprocs, self.nodes, self.ppn)


def discover_topology(comm, emulated_ppn: int | None = None) -> Topology:
    """Nodes from MPI_Comm_split_type(SHARED), or K-rank emulated nodes on one host
    (``emulated_ppn``, else OSU_DL_BENCH_RANKS_PER_NODE); also sets the emulation for
    the hierarchical algorithms bound afterwards."""
    from mpi4py import MPI

    from collectives.topology import (
        emulated_ranks_per_node,
        set_emulated_ranks_per_node,
        split_nodes,
    )

    if emulated_ppn:
        set_emulated_ranks_per_node(emulated_ppn)
    agree_on_errors(comm, emulated_ranks_per_node)  # a bad variable on any rank stops all
    names = comm.allgather(MPI.Get_processor_name())
    nodes = split_nodes(comm)
    try:
        ppn = comm.allreduce(nodes.local.Get_size(), op=MPI.MAX)
    finally:
        nodes.local.Free()
        if nodes.leaders != MPI.COMM_NULL:
            nodes.leaders.Free()
    emulated = emulated_ranks_per_node() is not None
    rank_nodes = comm.allgather(f"emulated-node{nodes.node}" if emulated else names[comm.rank])
    hostnames = tuple(sorted(set(names)))
    return Topology(comm.Get_size(), nodes.nodes, ppn, hostnames, emulated, tuple(rank_nodes))
