"""MPICH's collective selection as it decides, layer by layer, and the candidates a sweep
measures there: each is MPICH's generic trees with one change.

Where MPICH 5.0.x decides an allreduce or bcast of COMM_WORLD (a "parent" communicator:
a node_comm per node and a node_roots_comm of one rank per node, src/mpi/comm/commutil.c):

1. **ch4** picks a *composition* from its tree (src/mpid/ch4/src/ch4_coll.h; the
   compositions in ch4_coll_impl.h). Allreduce: alpha = shared-memory reduce on node_comm,
   netmod allreduce on node_roots_comm, shared-memory bcast; beta = netmod allreduce on the
   whole communicator; gamma = the shared-memory allreduce on the whole communicator (one
   node only). Bcast: alpha = netmod bcast on node_roots_comm, then shared memory on
   node_comm; beta = alpha with the root's node first; gamma = netmod bcast on the whole
   communicator; delta = alpha staged through the host for GPU buffers. The netmods (ofi,
   ucx) run MPIR's collectives.
2. **POSIX** (src/mpid/ch4/shm/posix/posix_coll.h) picks ``release_gather`` or falls back
   to MPIR where its tree has no match (its generic tree: not multi-threaded, and for
   allreduce a commutative op).
3. **MPIR** (src/mpi/coll/src/csel.c) picks an algorithm from its tree, which must match.

``call_path`` walks the three trees for one call and names what runs; a candidate whose
path equals the default's at a size runs the default's code there and is not a candidate
at that size. ``OVERSUBSCRIBED`` (ranks > cores, runtime.launcher.OVERSUBSCRIBED_CVARS)
pins the POSIX layer to MPIR by its CVAR, which wins over the POSIX tree. Nothing here
loads MPI or reads a file: the trees are passed in.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from collectives.errors import UsageError
from collectives.powers import is_power_of_two, largest_power_of_two_at_most

LAYERS = ("ch4", "posix", "mpir")
COLLECTIVES = ("allreduce", "bcast")
Tree = dict[str, Any]
Trees = Mapping[str, Tree]

# The compositions MPICH's ch4 tree can name (its csel container names: a ch4 tree naming
# another aborts MPI_Init); allreduce's delta is reachable only through its CVAR.
COMPOSITIONS = {
    "allreduce": ("alpha", "beta", "gamma"),
    "bcast": ("alpha", "beta", "gamma", "delta"),
}
# Compositions that use node_comm / node_roots_comm: MPICH's tree names them under
# comm_hierarchy=parent only. Allreduce gamma is the shared-memory allreduce of the whole
# communicator: MPICH names it only where comm_size=node_comm_size (one node).
_PARENT_ONLY = {("allreduce", "alpha"), ("bcast", "alpha"), ("bcast", "beta"), ("bcast", "delta")}
_ONE_NODE_ONLY = {("allreduce", "gamma")}
# MPIR algorithms a file may name without parameters of their own (MPICH's
# csel_container.c parses tree/k/chunk parameters for the others).
MPIR_ALGORITHMS = {
    "allreduce": ("recursive_doubling", "reduce_scatter_allgather", "ring", "smp"),
    "bcast": ("binomial", "scatter_recursive_doubling_allgather", "scatter_ring_allgather", "smp"),
}
# The node-aware algorithms: they run the collective again on node_comm and
# node_roots_comm, so they need a parent communicator (MPICH asserts it,
# bcast_intra_smp.c) and degenerate on one node.
PARENT_ONLY_MPIR = "smp"
# The candidate that routes a collective's POSIX choice to MPIR.
POSIX_MPIR = "posix_mpir"
# Names, in a launch's environment, the candidates its selection files load.
CANDIDATES_VARIABLE = "OSU_DL_BENCH_MPICH_CANDIDATES"
# The variable that replaces each layer's tree with a file (MPICH's CVARs, as
# `mpivars` and the library's own strings name them).
FILE_VARIABLES = {
    "ch4": "MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE",
    "posix": "MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE",
    "mpir": "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE",
}
# What MPICH does when an algorithm it was told to run cannot run (src/mpi/coll/src/
# coll_impl.c): 'silent' (its default) runs another one without a word, 'print' says so on
# stderr, 'error' fails the call. Every library launch of the suite sets 'error'.
FALLBACK_VARIABLE = "MPIR_CVAR_COLLECTIVE_FALLBACK"


def candidates_text(forced: Mapping[str, str]) -> str:
    """collective -> alg as CANDIDATES_VARIABLE's value: 'allreduce=ch4_beta,bcast=...'."""
    return ",".join(f"{c}={a}" for c, a in sorted(forced.items()))


@dataclass(frozen=True)
class Candidate:
    """One change to MPICH's generic trees: its ``alg`` name (``native:alg=NAME``), the
    collective and the layer it acts on, and what it chooses there."""

    collective: str
    alg: str
    layer: str
    choice: str

    def describe(self) -> str:
        """'ch4 composition beta', 'POSIX -> MPIR fallback', 'MPIR ring'."""
        if self.layer == "ch4":
            return f"ch4 composition {self.choice}"
        if self.layer == "posix":
            return "POSIX: fall back to MPIR (no release_gather)"
        return f"MPIR algorithm {self.choice}"


def candidates(collective: str) -> list[Candidate]:
    """Every layered candidate of ``collective`` ([] for a collective not covered)."""
    if collective not in COLLECTIVES:
        return []
    found = [Candidate(collective, f"ch4_{c}", "ch4", c) for c in COMPOSITIONS[collective]]
    found.append(Candidate(collective, POSIX_MPIR, "posix", "mpir"))
    found += [Candidate(collective, f"mpir_{a}", "mpir", a) for a in MPIR_ALGORITHMS[collective]]
    return found


def is_candidate(collective: str, alg: str) -> bool:
    """Whether ``alg`` names a layered candidate of ``collective``."""
    return any(c.alg == alg for c in candidates(collective))


def candidate(collective: str, alg: str) -> Candidate:
    """The candidate ``alg`` of ``collective``, or a UsageError naming the choices."""
    found = {c.alg: c for c in candidates(collective)}
    if alg not in found:
        raise UsageError(
            f"native:alg={alg}: MPICH has no such {collective} candidate: expected one of "
            f"{', '.join(found) or 'none'}"
        )
    return found[alg]


# --- the trees a candidate loads ----------------------------------------------------------


def composition_subtree(collective: str, name: str, default: Tree) -> Tree:
    """``composition=NAME`` under the conditions MPICH's own tree names it under, the
    generic subtree (``default``, the collective's comm_type=intra) elsewhere."""
    leaf = {f"composition=MPIDI_{collective.capitalize()}_intra_composition_{name}": {}}
    if (collective, name) in _PARENT_ONLY:
        return {"comm_hierarchy=parent": leaf, "comm_hierarchy=any": copy.deepcopy(default)}
    if (collective, name) in _ONE_NODE_ONLY:
        return {"comm_size=node_comm_size": leaf, "comm_size=any": copy.deepcopy(default)}
    return leaf


# MPICH's allreduce algorithms run only under conditions its own tree checks before it
# names them (src/mpi/coll/allreduce/*.c): reduce_scatter_allgather asserts a built-in op
# (HANDLE_IS_BUILTIN) and needs count >= the comm size's power of two; every algorithm but
# recursive doubling needs a commutative op. A tree naming one unguarded would abort or
# miscompute calls that break them, so each keeps MPICH's default where they fail.
_NEEDS_BUILT_IN_OP = frozenset({"MPIR_Allreduce_intra_reduce_scatter_allgather"})
_ANY_OP = frozenset({"MPIR_Allreduce_intra_recursive_doubling", "MPIR_Allreduce_allcomm_nb"})


def guarded(collective: str, target: str, default_intra: Tree) -> Tree:
    """``algorithm=target`` (an MPIR function) under the conditions MPICH needs for it,
    MPICH's default tree (``default_intra``) where they fail: a built-in and commutative op
    where the algorithm needs one, a parent communicator for the node-aware ones (MPICH
    5.0.2 asserts ``MPIR_Comm_is_parent_comm`` in bcast_intra_smp.c)."""
    chosen = _op_guarded(collective, target, default_intra)
    if not target.endswith(f"_intra_{PARENT_ONLY_MPIR}"):
        return chosen
    return {"comm_hierarchy=parent": chosen, "comm_hierarchy=any": copy.deepcopy(default_intra)}


def _op_guarded(collective: str, target: str, default_intra: Tree) -> Tree:
    chosen: Tree = {f"algorithm={target}": {}}
    if collective != "allreduce" or target in _ANY_OP:
        return chosen
    if target in _NEEDS_BUILT_IN_OP:
        chosen = {
            "is_op_built_in=yes": {"count<pow2": copy.deepcopy(default_intra), "count=any": chosen},
            "is_op_built_in=no": copy.deepcopy(default_intra),
        }
    return {"is_commutative=yes": chosen, "is_commutative=no": copy.deepcopy(default_intra)}


def mpir_function(collective: str, alg: str) -> str:
    """MPIR's function name of an algorithm value: 'ring' -> 'MPIR_Allreduce_intra_ring'."""
    return f"MPIR_{collective.capitalize()}_intra_{alg}"


def posix_to_mpir(leaf: Tree | None = None) -> Tree:
    """A POSIX subtree that never matches, so MPICH falls back to MPIR: a leaf under
    ``comm_type=inter`` (the POSIX layer sees intra-communicators only; MPICH 5.0.2 accepts
    no MPIR name in a POSIX tree, posix_init.c)."""
    return {"comm_type=inter": copy.deepcopy(leaf) if leaf else {}}


def changed_tree(cand: Candidate, base: Trees) -> Tree:
    """The tree of ``cand``'s layer with its one change (``base``: MPICH's generic trees)."""
    tree = copy.deepcopy(base[cand.layer])
    key = f"collective={cand.collective}"
    if cand.layer == "ch4":
        default = tree[key]["comm_type=intra"]
        tree[key] = {"comm_type=intra": composition_subtree(cand.collective, cand.choice, default)}
    elif cand.layer == "posix":
        tree[key] = posix_to_mpir(first_leaf(tree.get(key, {})))
    else:
        default = tree[key]["comm_type=intra"]
        target = mpir_function(cand.collective, cand.choice)
        tree[key]["comm_type=intra"] = guarded(cand.collective, target, default)
    return tree


def first_leaf(node: Tree) -> Tree | None:
    """The first algorithm or composition leaf under ``node``, in file order (None: none)."""
    for key, child in node.items():
        if key.startswith(("algorithm=", "composition=")):
            return {key: {}}
        found = first_leaf(child) if isinstance(child, dict) else None
        if found:
            return found
    return None


# --- walking the trees: what runs for one call --------------------------------------------


@dataclass(frozen=True)
class Call:
    """One call of a collective on COMM_WORLD: its shape and what MPICH's trees test."""

    collective: str
    nprocs: int
    nodes: int
    nbytes: int
    itemsize: int = 8
    commutative: bool = True
    built_in_op: bool = True
    threaded: bool = False
    oversubscribed: bool = False

    @property
    def ranks_per_node(self) -> int:
        """Ranks on each node (the job's ranks spread evenly)."""
        return max(1, self.nprocs // max(1, self.nodes))


_CONDITION = re.compile(r"^(\w+?)(<=|<|=)(.+)$")


def condition_names(tree: Any) -> set[str]:
    """The names of the conditions a selection tree tests ('comm_size' of 'comm_size<=4',
    'any'), the parameters under its algorithm and composition leaves left out; ValueError
    where a key's value is no object (MPICH's csel parse asserts that each is one,
    src/mpi/coll/src/csel.c)."""
    if not isinstance(tree, dict):
        raise ValueError("a selection tree's values are objects")
    names: set[str] = set()
    for key, child in tree.items():
        if not isinstance(child, dict):
            raise ValueError(f"the value of {key!r} is no object")
        if key.startswith(("algorithm=", "composition=")):
            continue
        match = _CONDITION.match(key)
        names.add(match.group(1) if match else key)
        names |= condition_names(child)
    return names


def _holds(key: str, facts: Mapping[str, Any]) -> bool:
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
        if relation == "=":
            return is_power_of_two(fact)
        return fact < largest_power_of_two_at_most(max(facts["comm_size"], 1))
    if value == "node_comm_size":
        return fact == facts.get("node_comm_size")
    if relation == "=":
        return str(fact) == value
    return fact <= int(value) if relation == "<=" else fact < int(value)


def search(tree: Tree, facts: Mapping[str, Any]) -> str | None:
    """The leaf (``algorithm=...`` or ``composition=...``, its name) MPICH's csel search
    reaches for ``facts``: at each node the first key that holds, in file order; None where
    none holds."""
    node = tree
    while isinstance(node, dict):
        for key, child in node.items():
            if key.startswith(("algorithm=", "composition=")):
                return key.split("=", 1)[1]
            if _holds(key, facts):
                node = child
                break
        else:
            return None
    return None


def _facts(call: Call, comm_size: int, parent: bool, node_comm_size: int) -> dict[str, Any]:
    count = call.nbytes // max(1, call.itemsize)
    yes_no = {True: "yes", False: "no"}
    return {
        "collective": call.collective,
        "comm_type": "intra",
        "comm_size": comm_size,
        "node_comm_size": node_comm_size,
        "comm_hierarchy": "parent" if parent else "flat",
        "avg_msg_size": call.nbytes,
        "total_msg_size": call.nbytes,
        "count": count,
        "is_commutative": yes_no[call.commutative],
        "is_op_built_in": yes_no[call.built_in_op],
        "is_multi_threaded": yes_no[call.threaded],
    }


def _mpir(call: Call, trees: Trees, comm: str, size: int, parent: bool) -> tuple[str, ...]:
    """What MPIR runs on a communicator of ``size`` ranks ('' where nothing moves)."""
    if size <= 1:
        return ()
    facts = _facts(call, size, parent, call.ranks_per_node)
    sub = trees["mpir"].get(f"collective={call.collective}", {})
    found = search(sub, facts)
    if found is None:
        raise UsageError(f"MPICH's MPIR tree has no {call.collective} leaf for {facts}")
    return (f"mpir[{comm}]:{found.removeprefix(f'MPIR_{call.collective.capitalize()}_intra_')}",)


def _posix(call: Call, trees: Trees, collective: str, comm: str, size: int) -> tuple[str, ...]:
    """What the POSIX layer runs for ``collective`` on a one-node communicator."""
    if size <= 1:
        return ()
    # A user-defined op does not take release_gather's allreduce (MPICH 5.0.2, seen with
    # the non-associative fingerprint of collectives/mpit.py: MPIR's per-rank orders).
    user_op_allreduce = collective == "allreduce" and not call.built_in_op
    if not call.oversubscribed and not user_op_allreduce:
        facts = _facts(call, size, False, size)
        found = search(trees["posix"].get(f"collective={collective}", {}), facts)
        if found is not None:
            return (f"posix[{comm}]:{found.removeprefix('MPIDI_POSIX_mpi_')}",)
    return _mpir(
        replace(call, collective=collective, nprocs=size, nodes=1), trees, comm, size, False
    )


def call_path(call: Call, trees: Trees) -> tuple[str, ...]:
    """The code one call runs under ``trees``, layer by layer: the composition, then each
    step's POSIX or MPIR choice with the communicator it runs on."""
    p, nodes, ppn = call.nprocs, call.nodes, call.ranks_per_node
    facts = _facts(call, p, parent=p > 1, node_comm_size=ppn)
    found = search(trees["ch4"].get(f"collective={call.collective}", {}), facts)
    if found is None:  # ch4 falls back to MPIR's own selection on the whole communicator
        return ("ch4:none", *_mpir(call, trees, "world", p, parent=True))
    comp = found.rsplit("_", 1)[1]
    steps: tuple[str, ...] = (f"ch4:{comp}",)
    roots = "node_roots"
    if call.collective == "allreduce":
        if comp == "alpha":
            steps += _posix(call, trees, "reduce", "node", ppn)
            steps += _mpir(call, trees, roots, nodes, parent=False)
            steps += _posix(call, trees, "bcast", "node", ppn)
        elif comp == "beta":
            steps += _mpir(call, trees, "world", p, parent=True)
        else:
            steps += _posix(call, trees, "allreduce", "world", p)
        return steps
    if comp == "gamma":
        return steps + _mpir(call, trees, "world", p, parent=True)
    # alpha, beta and delta with the root on node 0 as node_comm's rank 0 (the suite's
    # root 0) and host buffers run the same steps: roots' bcast, then node_comm's.
    steps = ("ch4:alpha|beta|delta",)
    steps += _mpir(call, trees, roots, nodes, parent=False)
    return steps + _posix(call, trees, "bcast", "node", ppn)


def running_code(call: Call, trees: Trees) -> tuple[str, ...]:
    """call_path's steps that move data, each with the ranks it runs on: the composition's
    name left out (where two compositions hand the call to the same algorithm on the same
    communicator, as beta and gamma do to MPIR once POSIX falls back, they run the same
    code) and a communicator with the world's ranks named as the world: node_comm on one
    node, node_roots_comm at one rank per node."""
    steps = call_path(call, trees)[1:]
    alike = "[node]" if call.nodes == 1 else "[node_roots]" if call.ranks_per_node == 1 else ""
    if not alike:
        return steps
    return tuple(step.replace(alike, "[world]", 1) for step in steps)


def same_code(call: Call, trees: Trees, other: Trees) -> bool:
    """Whether ``call`` runs the same code under ``trees`` and ``other``."""
    return running_code(call, trees) == running_code(call, other)


def candidate_trees(cand: Candidate, base: Trees) -> dict[str, Tree]:
    """``base`` with ``cand``'s layer changed."""
    return {**base, cand.layer: changed_tree(cand, base)}


def identical_reason(cand: Candidate, call: Call, base: Trees) -> str | None:
    """Why ``cand`` runs the default's code for ``call`` (None: it runs other code)."""
    if not same_code(call, candidate_trees(cand, base), base):
        return None
    default = call_path(call, base)
    if cand.layer == "posix" and call.oversubscribed:
        return "the POSIX layer is pinned to MPIR by the oversubscription setting"
    if cand.layer == "mpir" and cand.choice == PARENT_ONLY_MPIR and call.nodes == 1:
        return "smp needs several nodes (on one node it is the default's path)"
    mine = call_path(call, candidate_trees(cand, base))
    if mine != default:
        code = " > ".join(running_code(call, base))
        return f"the default's code ({code}) under another composition: {' > '.join(mine)}"
    return f"same path as the default: {' > '.join(default)}"


def candidate_sizes(cand: Candidate, call: Call, sizes: list[int], base: Trees) -> dict[int, str]:
    """size -> why ``cand`` is the default's code there, for the sizes where it is."""
    found = {}
    for size in sizes:
        reason = identical_reason(cand, replace(call, nbytes=size), base)
        if reason is not None:
            found[size] = reason
    return found


def path_text(call: Call, trees: Trees) -> str:
    """call_path as one line."""
    return " > ".join(call_path(call, trees))


def log2_sizes(lo: int, hi: int) -> list[int]:
    """Powers of two from ``lo`` to ``hi`` bytes."""
    return [1 << e for e in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
