"""The shape of a job: how many ranks, on how many nodes, how many on each."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobShape:
    """p ranks on ``nodes`` nodes of ``ppn`` ranks (spread evenly when ``ppn`` is None)."""

    nprocs: int
    nodes: int = 1
    ppn: int | None = None

    @classmethod
    def packed(cls, nprocs: int, ppn: int) -> JobShape:
        """``nprocs`` ranks ``ppn`` to a node on as few nodes as hold them, the last node
        taking the rest (a ``ppn`` above ``nprocs`` is one node of ``nprocs``)."""
        if ppn < 1:
            raise ValueError(f"expected ranks per node >= 1, got {ppn}")
        ppn = min(ppn, nprocs)
        return cls(nprocs, -(-nprocs // ppn), ppn)

    @property
    def ranks_per_node(self) -> int:
        """ppn, or the ranks spread evenly over the nodes."""
        return self.ppn or -(-self.nprocs // max(self.nodes, 1))

    def problem(self) -> str | None:
        """Why ``nodes`` nodes with at most ``ppn`` ranks each cannot hold ``nprocs``
        ranks, every node at least one (None if they can: 4 ranks on 3 nodes of ppn 2 are
        2 + 1 + 1, as Slurm's block distribution places them)."""
        p, nodes = self.nprocs, self.nodes
        counts = {"ranks": p, "nodes": nodes, "ranks per node": self.ppn}
        below = [f"{name} {n}" for name, n in counts.items() if n is not None and n < 1]
        if below:
            return f"expected at least 1 rank, node and rank per node, got {', '.join(below)}"
        ppn = self.ranks_per_node
        if ppn > p:
            return f"{ppn} ranks per node is more than the job's {p} ranks"
        if nodes > p:
            return f"{nodes} nodes cannot each run one of {p} ranks"
        if nodes * ppn < p:
            return f"{nodes} nodes of {ppn} ranks hold {nodes * ppn}, fewer than {p} ranks"
        if ppn + nodes - 1 > p:
            return (
                f"{p} ranks cannot fill a node with {ppn} and give each of the other "
                f"{nodes - 1} nodes one"
            )
        return None

    def __str__(self) -> str:
        nodes = f"{self.nodes} node{'' if self.nodes == 1 else 's'}"
        return f"p={self.nprocs} ({nodes} x {self.ranks_per_node} ppn)"
