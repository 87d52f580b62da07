"""The shape of a job: how many ranks, on how many nodes, how many on each."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobShape:
    """p ranks on ``nodes`` nodes of ``ppn`` ranks (spread evenly when ``ppn`` is None)."""

    nprocs: int
    nodes: int = 1
    ppn: int | None = None

    @property
    def ranks_per_node(self) -> int:
        """ppn, or the ranks spread evenly over the nodes."""
        return self.ppn or -(-self.nprocs // max(self.nodes, 1))

    def __str__(self) -> str:
        nodes = f"{self.nodes} node{'' if self.nodes == 1 else 's'}"
        return f"p={self.nprocs} ({nodes} x {self.ranks_per_node} ppn)"
