"""Predicted seconds of a registered variant on a platform: the algorithm's own cost
formula (``Algorithm.cost``; Thakur, Rabenseifner and Gropp, IJHPCA 2005) evaluated with
the platform's parameters.

How the parameters enter:

- the link of a collective of n bytes is the platform's piece for n (piecewise Hockney);
- our algorithms pay the platform's software overhead on top of alpha at every message
  step (Python between MPI calls) and reduce with numpy (gamma); ``native`` is the C
  library: alpha alone, and the library's own reduction (gamma_native, when measured);
- ``native`` is costed as the algorithm MPICH's default selection runs (mpich_native; on
  one node not oversubscribed, allreduce and bcast with MPICH's own shared-memory
  release_gather design, whose flag waves are timed by the state's barrier);
  backends without a cost formula (gloo) are not modelled (None);
- the intra-node link, gamma and the software overhead are those of a contention state of
  the platform (platform.ContentionState: measured with that many ranks of the node all
  sending, receiving and reducing at once). Symmetric collectives (allreduce, allgather,
  reduce_scatter, alltoall: every rank sends and receives in every step) take the state
  of the node's rank count; rooted ones (bcast, reduce, gather, scatter: the data fans out
  of or into one root, so in most steps only some ranks copy while the others wait) take
  the state with the fewest ranks. A rank count between or beyond the measured ones
  takes the nearest measured state at most that large; more ranks than that state's on
  a node with fewer cores than ranks time-share the cores further: every term is
  multiplied by max(1, ranks / cores) / max(1, state's ranks / cores)
  (``cores_per_node``; null in a platform file: never). Without states, the state is the
  platform's own link at 1 rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectives import SPECS, Variant
from collectives.common import LinkCost, Machine
from collectives.registry import parse_variant
from collectives.shape import JobShape
from osu_dl_bench.model.mpich_native import flag_wave, native_label, release_gather_seconds
from osu_dl_bench.model.platform import Link, Platform


def local_ranks(layout: JobShape) -> int:
    """Ranks sharing one node."""
    return min(layout.ranks_per_node, layout.nprocs)


def oversubscription(platform: Platform, layout: JobShape) -> float:
    """How many times a node's ranks outnumber its cores (at least 1)."""
    cores = platform.cores_per_node
    return max(1.0, local_ranks(layout) / cores) if cores else 1.0


@dataclass(frozen=True)
class NodeState:
    """The intra-node parameters a layout sees, and the slowdown still to apply to them."""

    intra: Link
    software_overhead_s: float
    barrier_s: float | None
    slowdown: float
    ranks: int = 1  # of the measured state


def node_state(platform: Platform, layout: JobShape, symmetric: bool = True) -> NodeState:
    """The measured contention state for the layout's ranks per node (``symmetric``: every
    rank active in every step; else the fewest ranks measured), scaled by the time-sharing
    its extra ranks add (module docstring)."""
    state = platform.state_for(local_ranks(layout) if symmetric else 1)
    if state is None:
        return NodeState(
            platform.intra, platform.software_overhead_s, None, oversubscription(platform, layout)
        )
    measured = oversubscription(platform, JobShape(state.ranks))
    return NodeState(
        state.intra,
        state.software_overhead_s,
        state.barrier_s,
        oversubscription(platform, layout) / measured,
        state.ranks,
    )


def _link_cost(link: Link, nbytes: float, native: bool, overhead: float, slowdown: float):
    alpha, beta, gamma = link.at(nbytes, native)
    return LinkCost((alpha + overhead) * slowdown, beta * slowdown, gamma * slowdown)


def machine_for(
    platform: Platform, layout: JobShape, nbytes: float, native: bool, symmetric: bool = True
) -> Machine:
    """The cost model's Machine for a call of ``nbytes``: native pays the library's own
    reduction and no Python overhead; our algorithms numpy's reduction and the overhead."""
    node = node_state(platform, layout, symmetric)
    overhead = 0.0 if native else node.software_overhead_s
    inter_overhead = 0.0 if native else platform.software_overhead_s
    return Machine(
        _link_cost(node.intra, nbytes, native, overhead, node.slowdown),
        _link_cost(platform.inter, nbytes, native, inter_overhead, node.slowdown),
        ppn=local_ranks(layout),
    )


def _latency_only(link: LinkCost) -> LinkCost:
    return LinkCost(link.alpha, 0.0, 0.0)


def _bandwidth_only(link: LinkCost) -> LinkCost:
    return LinkCost(0.0, link.beta, link.gamma)


def _split(machine: Machine) -> tuple[Machine, Machine]:
    """The machine with only its per-message terms, and with only its per-byte terms."""
    return (
        Machine(_latency_only(machine.intra), _latency_only(machine.inter), machine.ppn),
        Machine(_bandwidth_only(machine.intra), _bandwidth_only(machine.inter), machine.ppn),
    )


def modelled_variant(
    collective: str, variant: Variant, layout: JobShape, nbytes: int, posix: bool = True
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


def _is_mpi_native(variant: Variant) -> bool:
    return variant.algorithm.name == "native" and variant.algorithm.backend == "mpi"


def _release_gather(
    platform: Platform, collective: str, layout: JobShape, nbytes: int
) -> tuple[float, float] | None:
    """MPICH's shared-memory allreduce or bcast (one node, not oversubscribed): its flag
    waves, and its copies and reductions."""
    symmetric = not SPECS[collective].rooted
    node = node_state(platform, layout, symmetric)
    link = machine_for(platform, layout, nbytes, True, symmetric).intra
    wave = link.alpha
    if node.barrier_s is not None:
        wave = flag_wave(node.barrier_s, node.ranks) * node.slowdown
    latency = release_gather_seconds(collective, _latency_only(link), wave, layout.nprocs, nbytes)
    if latency is None:
        return None
    data = release_gather_seconds(collective, _bandwidth_only(link), 0.0, layout.nprocs, nbytes)
    return latency, data


def predict_parts(
    platform: Platform, collective: str, variant: Variant, layout: JobShape, nbytes: int
) -> tuple[float, float] | None:
    """The formula's predicted seconds of one call in two parts, or None if the variant is
    not modelled: its per-message terms (alpha, the software overhead, MPICH's flag waves)
    and its per-byte terms (beta, gamma). Every formula is linear in alpha, beta and gamma,
    so the parts add up to the whole."""
    posix = oversubscription(platform, layout) <= 1.0
    if posix and layout.nodes == 1 and _is_mpi_native(variant):
        parts = _release_gather(platform, collective, layout, nbytes)
        if parts is not None:
            return parts
    found = modelled_variant(collective, variant, layout, nbytes, posix)
    if found is None:
        return None
    target, native = found
    machine = machine_for(platform, layout, nbytes, native, target.algorithm.busy_everywhere())
    cost = target.algorithm.cost
    latency, data = _split(machine)
    return (
        float(cost(latency, layout.nprocs, nbytes, **target.params)),
        float(cost(data, layout.nprocs, nbytes, **target.params)),
    )


def predict_seconds(
    platform: Platform, collective: str, variant: Variant, layout: JobShape, nbytes: int
) -> float | None:
    """Predicted seconds of one call, or None if the variant is not modelled: the formula's
    parts, each times the platform's correction for the variant where it has one."""
    parts = predict_parts(platform, collective, variant, layout, nbytes)
    if parts is None:
        return None
    latency, data = platform.correction(
        collective, variant.label, layout.nprocs, layout.nodes, nbytes
    )
    return latency * parts[0] + data * parts[1]
