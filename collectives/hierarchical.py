"""Two-level (node-aware) allreduce and bcast: ``hierarchical:inner=NAME``.

Nodes come from collectives.topology.split_nodes (real shared-memory nodes, or emulated
nodes of K consecutive ranks, which must lie within real nodes). Local rank 0 of each
node is its leader. The intra-node steps run on the node's shared-memory window with the
engines of collectives.shm (not MPI_Reduce/MPI_Bcast on the node communicator): a node's
ranks read each other's memory directly. Messages go in chunks of shm.DEFAULT_CHUNK bytes.
``inner`` names any registered flat algorithm of the same collective, resolved with
registry.lookup when the variant is bound and run with its default parameters on the
communicator of the leaders (the shm and hierarchical algorithms themselves are refused).

allreduce ``hierarchical``, per chunk (Horovod's hierarchical allreduce, with shared memory
inside nodes instead of NCCL; Sergeev and Del Balso, arXiv:1802.05799):
  1. intra-node reduce-scatter: local rank r reduces slice r of the node's inputs into the
     node's result area (shm.NodeAllreduce);
  2. the leaders allreduce the result area in place with ``inner``;
  3. intra-node bcast: every rank copies the result out of the shared area.
  Cost, q ranks per node (machine.ppn), N = ceil(p/q) nodes, k chunks:
  3k lg q alpha_intra + (2(q-1)/q + 1) n beta_intra + (q-1)/q n gamma_intra
  + k inner(N, n/k) on the inter-node link.
  Needs a commutative op: when nodes are not blocks of consecutive ranks the leaders
  combine partial results out of rank order. Host (cpu) buffers (shared memory).
bcast ``hierarchical``, per chunk (the seed design of Awan et al.: inter-node among the
leaders, then intra-node; Awan et al., EuroMPI 2016 and PPoPP 2017):
  1. on the root's node the root writes the chunk into the node's shared area; if the root
     is not its node's leader, a node sync lets the leader see it (the leader forwards
     straight from shared memory: no extra message);
  2. the leaders bcast the area with ``inner`` from the root's node;
  3. node sync; every rank except the root copies the chunk out.
  Cost: k lg q alpha_intra (+ k lg q alpha_intra when the root is not a leader)
  + (n + C) beta_intra + k inner(N, n/k) on the inter-node link. Any root; host buffers.
Inner algorithms without a cost formula (native) are costed as the faster of the textbook
algorithms MPICH chooses between (Thakur, Rabenseifner and Gropp, IJHPCA 2005).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives import shm
from collectives.common import LinkCost, Machine, lg, private_comm
from collectives.dtypes import ELEMENT_TYPES, ElementType
from collectives.errors import UsageError
from collectives.ops import ReduceOp
from collectives.registry import (
    COMMUTATIVE_OP,
    CPU_BUFFERS,
    SEVERAL_NODES,
    SINGLE_NODE,
    Algorithm,
    CallContext,
    Counterpart,
    Variant,
    algorithms,
    lookup,
    register,
)
from collectives.topology import NodeComms, split_nodes

if TYPE_CHECKING:
    from mpi4py import MPI

NAME = "hierarchical"
DEFAULT_INNER = "native"
INNER_ALLREDUCE_GRID = ("native", "ring", "recursive_doubling", "rabenseifner")
# Not scatter_rd_allgather: it needs a power-of-two number of leaders.
INNER_BCAST_GRID = ("native", "binomial", "chain", "scatter_ring_allgather")


def _why_not_inner(algo: Algorithm) -> str | None:
    """None if ``algo`` can run among node leaders (one rank per node), else why not."""
    if algo.name == NAME:
        return "is itself hierarchical"
    if SINGLE_NODE in algo.requires:
        return "runs within one node only"
    return None


def resolve_inner(collective: str, name: str) -> Variant:
    """The flat algorithm ``name`` of ``collective`` (with its defaults) for the leaders;
    a UsageError naming the usable choices otherwise."""
    try:
        algo = lookup(collective, name)
        why = _why_not_inner(algo)
    except UsageError:
        why = f"is not a registered {collective} algorithm"
    if why:
        usable = [a.name for a in algorithms(collective) if _why_not_inner(a) is None]
        raise UsageError(
            f"{NAME} {collective}, inner={name}: {name!r} {why}: "
            f"expected one of {', '.join(usable)}"
        )
    return algo.variant()


def inner_reason(collective: str, ctx: CallContext, params) -> str | None:
    """Why the inner algorithm cannot run among this context's node leaders, or None."""
    inner = resolve_inner(collective, params["inner"])
    leaders = replace(ctx, nprocs=ctx.nodes, ppn=1)
    reason = inner.ineligible_reason(leaders)
    return f"inner {inner.label} among {ctx.nodes} node leaders {reason}" if reason else None


def _element_type(dtype: np.dtype) -> ElementType:
    known = ELEMENT_TYPES.get(dtype.name)
    return known if known is not None else ElementType(dtype.name, dtype, dtype.name, 0.0)


def _inner_guard(collective: str, inner: Variant, nodes: int) -> Callable[[Any, Any], None]:
    """A per-call check that ``inner`` is eligible among ``nodes`` leaders for this dtype
    and op. Every rank decides alike (same nodes, dtype, op), so none is left waiting."""
    verdicts: dict[tuple[np.dtype, str | None], str | None] = {}

    def check(dtype: np.dtype, op: ReduceOp | None) -> None:
        key = (dtype, op and op.name)
        if key not in verdicts:
            ctx = CallContext(nodes, _element_type(dtype), op, "cpu", nodes, 1)
            verdicts[key] = inner.ineligible_reason(ctx)
        if verdicts[key]:
            raise UsageError(
                f"{NAME} {collective}: inner={inner.algorithm.name} cannot run among "
                f"{nodes} node leaders: {verdicts[key]}"
            )

    return check


def _no_check(dtype: np.dtype, op: ReduceOp | None) -> None:
    """One node: the inner algorithm never runs."""


def _leaders_allreduce(inner: Variant, nodes: NodeComms) -> shm.AllreduceStep | None:
    """The leaders' step: ``inner`` in place on the node's result (None on one node)."""
    if nodes.nodes == 1:
        return None
    leaders_call = inner.bind(nodes.leaders) if nodes.is_leader else None

    def among_leaders(buf: Any, op: ReduceOp) -> None:
        leaders_call(None, buf, op, 0)  # only local rank 0, a leader, calls this

    return among_leaders


def _leaders_bcasts(inner: Variant, nodes: NodeComms) -> list[shm.BcastStep | None]:
    """For each root node, the leaders' step: ``inner`` from that node's leader."""
    if nodes.nodes == 1:
        return [None]
    leaders_call = inner.bind(nodes.leaders) if nodes.is_leader else None

    def from_node(root_node: int) -> shm.BcastStep:
        def among_leaders(buf: Any) -> None:
            leaders_call(None, buf, None, root_node)

        return among_leaders

    return [from_node(node) for node in range(nodes.nodes)]


def _rank_places(comm: MPI.Comm, nodes: NodeComms) -> list[tuple[int, int]]:
    """(node index, local rank) of every rank of ``comm``."""
    mine = np.array([nodes.node, nodes.local.Get_rank()], dtype=np.int64)
    table = np.empty((comm.Get_size(), 2), dtype=np.int64)
    comm.Allgather(mine, table)
    return [(int(node), int(local)) for node, local in table]


# --- cost model ---


def _chunks(n_bytes: int) -> int:
    # Every leader runs the inner algorithm chunk by chunk, even alone on its node.
    return max(1, math.ceil(n_bytes / shm.DEFAULT_CHUNK))


def _layout(machine: Machine, p: int) -> tuple[int, int]:
    """(ranks per node, nodes) of ``p`` ranks placed ``machine.ppn`` per node."""
    q = max(1, min(machine.ppn, p))
    return q, math.ceil(p / q)


def _inner_cost(
    collective: str,
    inner: str,
    machine: Machine,
    nodes: int,
    n_bytes: int,
    fallback: Callable[[LinkCost, int, int], float],
) -> float:
    """Seconds of ``inner`` among ``nodes`` leaders on the inter-node link."""
    algo = lookup(collective, inner)
    if algo.cost is None:
        return fallback(machine.inter, nodes, n_bytes)
    # One leader per node: every step crosses the inter-node link. The leaders run inner
    # in place on the node's result, so the out-of-place copy some costs count (an intra
    # link's n beta) does not happen: a free intra link.
    leaders = Machine(LinkCost(0.0, 0.0, 0.0), machine.inter, ppn=1)
    return algo.cost(leaders, nodes, n_bytes, **algo.defaults)


def _mpich_allreduce(link: LinkCost, p: int, n: int) -> float:
    """The faster of recursive doubling and Rabenseifner (what MPICH picks among)."""
    frac = (p - 1) / p
    doubling = lg(p) * (link.alpha + n * link.beta + n * link.gamma)
    rabenseifner = 2 * lg(p) * link.alpha + 2 * frac * n * link.beta + frac * n * link.gamma
    return min(doubling, rabenseifner)


def _mpich_bcast(link: LinkCost, p: int, n: int) -> float:
    """The faster of binomial and scatter + ring allgather (what MPICH picks among)."""
    binomial = lg(p) * (link.alpha + n * link.beta)
    van_de_geijn = (lg(p) + p - 1) * link.alpha + 2 * (p - 1) / p * n * link.beta
    return min(binomial, van_de_geijn)


def allreduce_cost(machine: Machine, p: int, n_bytes: int, inner: str = DEFAULT_INNER) -> float:
    """Intra-node shared-memory reduce-scatter and copy-out plus k inner allreduces."""
    q, nodes = _layout(machine, p)
    k = _chunks(n_bytes)
    syncs = 3 if nodes > 1 else 2
    intra = shm.node_allreduce_cost(machine.intra, q, n_bytes, shm.DEFAULT_CHUNK, syncs)
    if nodes == 1:
        return intra
    piece = math.ceil(n_bytes / k)
    return intra + k * _inner_cost("allreduce", inner, machine, nodes, piece, _mpich_allreduce)


def bcast_cost(machine: Machine, p: int, n_bytes: int, inner: str = DEFAULT_INNER) -> float:
    """Intra-node shared-memory copy in and out plus k inner bcasts (root a leader)."""
    q, nodes = _layout(machine, p)
    k = _chunks(n_bytes)
    intra = shm.node_bcast_cost(machine.intra, q, n_bytes, shm.DEFAULT_CHUNK)
    if nodes == 1:
        return intra
    piece = math.ceil(n_bytes / k)
    return intra + k * _inner_cost("bcast", inner, machine, nodes, piece, _mpich_bcast)


# --- algorithms ---


def _mpich_node_aware(name: str) -> Counterpart:
    """MPICH's node-aware algorithm ``name``: a node step, MPICH's own algorithm among the
    node leaders, a node step. MPICH runs it only on communicators it knows to span nodes
    (comm_hierarchy=parent), a condition an exported file's rules do not state."""
    return Counterpart(name, params={"inner": "native"}, exported=False)


@register(
    "allreduce",
    NAME,
    summary="shared-memory reduce-scatter in each node, inner allreduce among node leaders",
    requires=(COMMUTATIVE_OP, CPU_BUFFERS, SEVERAL_NODES),
    grid={"inner": INNER_ALLREDUCE_GRID},
    cost=allreduce_cost,
    check_params=lambda params: resolve_inner("allreduce", params["inner"]),
    param_reason=lambda ctx, params: inner_reason("allreduce", ctx, params),
    equivalents={"mpich": _mpich_node_aware("MPIR_Allreduce_intra_smp")},
)
def allreduce(comm: MPI.Comm, inner: str = DEFAULT_INNER):
    """Bind the two-level allreduce, ``inner`` being the allreduce among node leaders."""
    variant = resolve_inner("allreduce", inner)
    nodes = split_nodes(private_comm(comm))
    engine = shm.NodeAllreduce(nodes.local, shm.DEFAULT_CHUNK, _leaders_allreduce(variant, nodes))
    check = _inner_guard("allreduce", variant, nodes.nodes) if nodes.nodes > 1 else _no_check

    def call(send, recv, op, root):
        check(recv.dtype, op)
        engine.run(send, recv, op)

    return call


@register(
    "bcast",
    NAME,
    summary="inner bcast among node leaders, then shared memory in each node",
    requires=(CPU_BUFFERS, SEVERAL_NODES),
    grid={"inner": INNER_BCAST_GRID},
    cost=bcast_cost,
    check_params=lambda params: resolve_inner("bcast", params["inner"]),
    param_reason=lambda ctx, params: inner_reason("bcast", ctx, params),
    equivalents={"mpich": _mpich_node_aware("MPIR_Bcast_intra_smp")},
)
def bcast(comm: MPI.Comm, inner: str = DEFAULT_INNER):
    """Bind the two-level bcast, ``inner`` being the bcast among node leaders."""
    variant = resolve_inner("bcast", inner)
    own = private_comm(comm)
    nodes = split_nodes(own)
    places = _rank_places(own, nodes)
    engine = shm.NodeBcast(nodes.local, shm.DEFAULT_CHUNK)
    steps = _leaders_bcasts(variant, nodes)
    check = _inner_guard("bcast", variant, nodes.nodes) if nodes.nodes > 1 else _no_check

    def call(send, recv, op, root):
        check(recv.dtype, None)
        root_node, root_local = places[root]
        engine.run(recv, root_local if root_node == nodes.node else None, steps[root_node])

    return call
