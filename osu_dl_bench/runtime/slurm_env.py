"""The Slurm job (and step) this process runs in, read from its SLURM_* variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SlurmJob:
    """The Slurm job (and step) this process runs in, as its SLURM_* variables describe it."""

    job_id: str
    step_id: str
    nodes: int
    ntasks: int
    tasks_per_node: tuple[int, ...]  # per node, in node order

    @property
    def ntasks_per_node(self) -> int:
        """The most tasks on one node (Slurm's --ntasks-per-node for an even layout)."""
        return max(self.tasks_per_node, default=0)


def parse_tasks_per_node(text: str) -> tuple[int, ...]:
    """SLURM_TASKS_PER_NODE's compressed form, '2(x3),1' -> (2, 2, 2, 1)."""
    counts: list[int] = []
    for item in filter(None, text.split(",")):
        count, _, repeat = item.partition("(x")
        if not count.isdigit() or (repeat and not repeat.removesuffix(")").isdigit()):
            raise ValueError(f"SLURM_TASKS_PER_NODE: expected items like 4 or 2(x3), got {item!r}")
        counts += [int(count)] * (int(repeat.removesuffix(")")) if repeat else 1)
    return tuple(counts)


def slurm_job(env: Mapping[str, str] | None = None) -> SlurmJob | None:
    """The Slurm job from SLURM_JOB_ID, SLURM_JOB_NUM_NODES, SLURM_NTASKS and
    SLURM_TASKS_PER_NODE (a step's own layout inside srun); None outside Slurm."""
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID", "")
    if not job_id:
        return None
    try:
        per_node = parse_tasks_per_node(env.get("SLURM_TASKS_PER_NODE", ""))
    except ValueError:
        per_node = ()  # a layout we cannot read must not stop the run: record none
    nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES", "")
    ntasks = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS", "")
    return SlurmJob(
        job_id=job_id,
        step_id=env.get("SLURM_STEP_ID", ""),
        nodes=int(nodes) if nodes.isdigit() else len(per_node),
        ntasks=int(ntasks) if ntasks.isdigit() else sum(per_node),
        tasks_per_node=per_node,
    )


def slurm_local_count(value: str) -> int | None:
    """This node's entry of a Slurm per-node task list ('3,2(x2)'), by SLURM_NODEID."""
    try:
        per_node = parse_tasks_per_node(value)
    except ValueError:
        return None
    node = os.environ.get("SLURM_NODEID", "0")
    index = int(node) if node.isdigit() else 0
    return per_node[index] if index < len(per_node) else None
