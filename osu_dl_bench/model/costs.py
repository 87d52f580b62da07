"""Predicted seconds of a registered variant on a platform: the algorithm's own cost
formula (``Algorithm.cost``, REFERENCE.md section 5) evaluated with the platform's
parameters.

How the parameters enter:

- the link of a collective of n bytes is the platform's piece for n (piecewise Hockney);
- our algorithms pay the platform's software overhead on top of alpha at every message
  step (Python between MPI calls) and reduce with numpy (gamma); ``native`` is the C
  library: alpha alone, and the library's own reduction (gamma_native, when measured);
- ``native`` is costed as the algorithm MPICH's default selection runs (mpich_native; on
  one node not oversubscribed, the twin of its shared-memory collectives);
  backends without a cost formula (gloo) are not modelled (None);
- more ranks on a node than cores time-share them: every term is multiplied by
  ranks per node / cores (``cores_per_node``; null in a platform file: never).
"""

from __future__ import annotations

from dataclasses import dataclass

from osu_dl_bench.collectives import Variant
from osu_dl_bench.collectives.common import LinkCost, Machine
from osu_dl_bench.collectives.registry import parse_variant
from osu_dl_bench.model.mpich_native import native_label
from osu_dl_bench.model.platform import Link, Platform


@dataclass(frozen=True)
class Layout:
    """The job's shape: p ranks on ``nodes`` nodes of ``ppn`` ranks."""

    nprocs: int
    nodes: int = 1
    ppn: int | None = None

    @property
    def ranks_per_node(self) -> int:
        """ppn, or the ranks spread evenly over the nodes."""
        return self.ppn or -(-self.nprocs // max(self.nodes, 1))


def oversubscription(platform: Platform, layout: Layout) -> float:
    """How much slower every term gets when a node's ranks outnumber its cores."""
    cores = platform.cores_per_node
    local = min(layout.ranks_per_node, layout.nprocs)
    return max(1.0, local / cores) if cores else 1.0


def _link_cost(link: Link, nbytes: float, native: bool, overhead: float, slowdown: float):
    alpha, beta, gamma = link.at(nbytes, native)
    return LinkCost((alpha + overhead) * slowdown, beta * slowdown, gamma * slowdown)


def machine_for(platform: Platform, layout: Layout, nbytes: float, native: bool) -> Machine:
    """The cost model's Machine for a call of ``nbytes``: native pays the library's own
    reduction and no Python overhead; our algorithms numpy's reduction and the overhead."""
    overhead = 0.0 if native else platform.software_overhead_s
    slowdown = oversubscription(platform, layout)
    return Machine(
        _link_cost(platform.intra, nbytes, native, overhead, slowdown),
        _link_cost(platform.inter, nbytes, native, overhead, slowdown),
        ppn=min(layout.ranks_per_node, layout.nprocs),
    )


def modelled_variant(
    collective: str, variant: Variant, layout: Layout, nbytes: int, posix: bool = True
):
    """(variant whose formula applies, is_native) or None when the model has no formula;
    ``posix``: MPICH's shared-memory collectives answer on one node (not oversubscribed)."""
    if variant.algorithm.name == "native" and variant.algorithm.backend == "mpi":
        label = native_label(collective, layout.nprocs, nbytes, layout.nodes, posix=posix)
        if label is None:
            return None
        return parse_variant(collective, label), True
    if variant.algorithm.cost is None:
        return None
    return variant, False


def predict_seconds(
    platform: Platform, collective: str, variant: Variant, layout: Layout, nbytes: int
) -> float | None:
    """Predicted seconds of one call, or None if the variant is not modelled."""
    posix = oversubscription(platform, layout) <= 1.0
    found = modelled_variant(collective, variant, layout, nbytes, posix)
    if found is None:
        return None
    target, native = found
    machine = machine_for(platform, layout, nbytes, native)
    return float(target.algorithm.cost(machine, layout.nprocs, nbytes, **target.params))
