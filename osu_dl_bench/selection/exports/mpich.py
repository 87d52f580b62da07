"""Export for MPICH's collective selection (MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE;
grammar in MPICH's src/mpi/coll/src/csel.c).

The file replaces MPICH's whole MPIR-level tree, so it is MPICH's default tree
(mpich_default.py) with the subtrees of the exported collectives replaced by the table's
choices, each written as the MPIR algorithm it declares as its counterpart where it
registers (``Algorithm.equivalents["mpich"]``):
``collective=X -> comm_type=intra -> comm_size<=N ... comm_size=any -> avg_msg_size<=M ...
avg_msg_size=any -> algorithm=MPIR_...``. Keys are tried in file order and every chain ends
in an ``=any`` key. Where the table keeps native, or names an algorithm MPICH lacks, the
range holds MPICH's own default subtree for that collective, so MPICH decides as usual.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from collectives.registry import counterpart
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.selection.exports.common import (
    Rule,
    SweptEntry,
    beside,
    comm_bounds,
    entries_per_comm_size,
    library_rules,
    range_text,
    swept_entries,
    swept_rules,
)
from osu_dl_bench.selection.exports.mpich_default import default_tree
from osu_dl_bench.selection.table import Choice, TuningTable

LIBRARY = "mpich"
# The files export writes beside the table, the notes only where the sweep measured MPICH's
# own algorithms (both checked before any file is written).
SUFFIXES = (".mpich.json", ".mpich.notes.txt")
# The collectives this export writes; the others keep MPICH's default subtrees.
COLLECTIVES = ("allreduce", "bcast")
MPICH_DECIDES = "MPICH default"


def _target(collective: str, choice: Choice) -> tuple[str, str] | None:
    """The MPIR algorithm of a choice, or None if MPICH has no counterpart of it."""
    found = counterpart(collective, choice.algorithm, LIBRARY) if choice.backend == "mpi" else None
    if found is None or not found.exported:
        return None
    return found.name, choice.label


# MPICH's algorithms whose selection-file entry needs parameters of its own (tree type,
# k, chunk size: parse_container_params in MPICH's src/mpi/coll/src/csel_container.c),
# which the forced runs took from other CVARs; the export does not write them yet.
NEEDS_PARAMETERS = frozenset(
    {
        "MPIR_Allreduce_intra_tree",
        "MPIR_Allreduce_intra_recexch",
        "MPIR_Allreduce_intra_k_reduce_scatter_allgather",
        "MPIR_Allreduce_intra_recursive_multiplying",
        "MPIR_Allreduce_intra_ccl",
        "MPIR_Bcast_intra_tree",
        "MPIR_Bcast_intra_pipelined_tree",
    }
)


def mpir_algorithm(collective: str, alg: str) -> str | None:
    """The MPIR function MPICH's selection file names for a forced algorithm
    (MPIR_CVAR_<COLL>_INTRA_ALGORITHM value ``alg``), or None where the file cannot say it:
    the POSIX layer's choices (another file), algorithms needing parameters."""
    if alg.startswith("posix_"):
        return None
    coll = collective.capitalize()
    name = f"MPIR_{coll}_allcomm_nb" if alg == "nb" else f"MPIR_{coll}_intra_{alg}"
    return None if name in NEEDS_PARAMETERS else name


def _swept_tree(
    collective: str, entries: list[SweptEntry], default_intra: dict[str, Any], warn: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """comm_size keys over the library's own decisions; and a note line per rule."""
    tree, notes = {}, []
    bounds = comm_bounds([e.nprocs for e in entries])
    for bound, entry in zip(bounds, entries, strict=True):
        rules = swept_rules(
            entry,
            lambda alg: mpir_algorithm(collective, alg),
            MPICH_DECIDES,
            warn,
            "MPICH",
            collective,
        )
        key = "comm_size=any" if bound.hi is None else f"comm_size<={bound.hi}"
        tree[key] = _size_tree(collective, rules, default_intra)
        notes += [
            f"{collective} {key} {range_text(r.min_bytes, r.max_bytes)} -> {r.target}: {r.note}"
            for r in rules
        ]
    return tree, notes


# MPICH's allreduce algorithms run only under conditions its own tree checks before it
# names them (mpich_generic.json; src/mpi/coll/allreduce/*.c): reduce_scatter_allgather
# asserts a built-in op (HANDLE_IS_BUILTIN: a user-defined op aborts the job, seen with
# MPICH 5.0.2) and needs count >= the comm size's power of two; every algorithm but
# recursive doubling needs a commutative op. A file naming one unguarded would abort or
# miscompute applications whose calls break them, so each choice keeps MPICH's default
# wherever its conditions fail.
_NEEDS_BUILT_IN_OP = frozenset({"MPIR_Allreduce_intra_reduce_scatter_allgather"})
_ANY_OP = frozenset({"MPIR_Allreduce_intra_recursive_doubling", "MPIR_Allreduce_allcomm_nb"})


# The node-aware (smp) algorithms run the collective again on the communicators they
# split off; MPICH's own tree names them under comm_hierarchy=parent only, and a file
# naming one for every communicator aborts MPICH 5.0.2 in the nested call (seen:
# "Assertion failed in bcast_intra_smp.c: MPIR_Comm_is_parent_comm(comm_ptr)").
_PARENT_ONLY_SUFFIX = "_intra_smp"


def guarded(collective: str, target: str, default_intra: dict[str, Any]) -> dict[str, Any]:
    """``algorithm=target`` under the conditions MPICH needs for it, MPICH's default tree
    (``default_intra``) where they fail."""
    chosen = _op_guarded(collective, target, default_intra)
    if not target.endswith(_PARENT_ONLY_SUFFIX):
        return chosen
    return {"comm_hierarchy=parent": chosen, "comm_hierarchy=any": copy.deepcopy(default_intra)}


def _op_guarded(collective: str, target: str, default_intra: dict[str, Any]) -> dict[str, Any]:
    """``algorithm=target`` under the reduction-op conditions it needs (allreduce)."""
    chosen: dict[str, Any] = {f"algorithm={target}": {}}
    if collective != "allreduce" or target in _ANY_OP:
        return chosen
    if target in _NEEDS_BUILT_IN_OP:
        chosen = {
            "is_op_built_in=yes": {"count<pow2": copy.deepcopy(default_intra), "count=any": chosen},
            "is_op_built_in=no": copy.deepcopy(default_intra),
        }
    return {"is_commutative=yes": chosen, "is_commutative=no": copy.deepcopy(default_intra)}


def _size_tree(collective: str, rules: list[Rule], default_intra: dict[str, Any]) -> dict[str, Any]:
    """avg_msg_size<=M keys (M = range end - 1, MPICH compares inclusively), last =any."""
    tree = {}
    for rule in rules:
        last = rule.max_bytes is None
        key = "avg_msg_size=any" if last else f"avg_msg_size<={rule.max_bytes - 1}"
        if rule.target == MPICH_DECIDES:
            tree[key] = copy.deepcopy(default_intra)
        else:
            tree[key] = guarded(collective, rule.target, default_intra)
    return tree


def _intra_tree(
    collective: str,
    table: TuningTable,
    default_intra: dict[str, Any],
    warn: list[str],
    scope: str | None = None,
) -> dict[str, Any] | None:
    """comm_size<=N keys (bounds of the nearest-entry rule), last =any, over the entries
    in ``scope``; None if there is none."""
    entries = entries_per_comm_size(table, collective, warn, scope)
    if not entries:
        return None
    tree = {}
    bounds = comm_bounds([e.key.nprocs for e in entries])
    for bound, entry in zip(bounds, entries, strict=True):
        rules = library_rules(
            entry,
            lambda c: _target(collective, c),
            (MPICH_DECIDES, MPICH_DECIDES),
            warn,
            "MPICH",
        )
        key = "comm_size=any" if bound.hi is None else f"comm_size<={bound.hi}"
        tree[key] = _size_tree(collective, rules, default_intra)
    return tree


# MPICH's csel key that holds where the whole communicator is on one node (csel.c:
# CSEL_NODE_TYPE__OPERATOR__COMM_SIZE_NODE_COMM_SIZE); a table measured on several nodes
# puts its one-node entries under it and its several-node entries after it.
ONE_NODE_KEY = "comm_size=node_comm_size"


def _scoped_tree(
    collective: str,
    table: TuningTable,
    default_intra: dict[str, Any],
    warn: list[str],
    notes: list[str],
    scope: str | None,
) -> dict[str, Any] | None:
    """The comm_size tree of the entries in ``scope``: MPICH's own algorithms as the sweep
    decided among them where it measured them, else the table's choices' counterparts."""
    swept = swept_entries(table, LIBRARY, collective, warn, scope)
    if swept is None:
        return _intra_tree(collective, table, default_intra, warn, scope)
    intra, lines = _swept_tree(collective, swept, default_intra, warn)
    notes.extend(lines)
    return intra


def _measured_on_several_nodes(table: TuningTable, collective: str) -> bool:
    entries = [e.key for e in table.entries if e.key.collective == collective]
    return any(key.nodes > 1 for key in entries)


def document(table: TuningTable, warn: list[str], notes: list[str] | None = None) -> dict[str, Any]:
    """MPICH's default tree with the table's collectives in it: MPICH's own algorithms as
    the sweep decided among them where it measured them (``notes`` gets what was measured
    for each rule), else the counterparts of the table's choices. A table measured on
    several nodes keys its one-node entries on ONE_NODE_KEY (MPICH's default tree where it
    has none) and its several-node entries after it."""
    tree, notes = default_tree(), notes if notes is not None else []
    for collective in COLLECTIVES:
        branch = tree[f"collective={collective}"]
        default_intra = branch["comm_type=intra"]
        if not _measured_on_several_nodes(table, collective):
            intra = _scoped_tree(collective, table, default_intra, warn, notes, None)
        else:
            one = _scoped_tree(collective, table, default_intra, warn, notes, "one")
            several = _scoped_tree(collective, table, default_intra, warn, notes, "many")
            one = one if one is not None else copy.deepcopy(default_intra)
            intra = {ONE_NODE_KEY: one, **(several or {"comm_size=any": default_intra})}
        if intra is not None:
            branch["comm_type=intra"] = intra
    return tree


def export(table: TuningTable, base: Path) -> tuple[list[Path], list[str]]:
    """Write BASE.mpich.json (and, where the sweep measured MPICH's own algorithms,
    BASE.mpich.notes.txt: what was measured for each rule, since JSON has no comments);
    returns the paths and warnings."""
    warn: list[str] = []
    notes: list[str] = []
    path = beside(base, SUFFIXES[0])
    write_text_atomic(path, json.dumps(document(table, warn, notes), indent=1) + "\n")
    if not notes:
        return [path], warn
    notes_path = beside(base, SUFFIXES[1])
    head = [
        f"# {path.name}: MPICH's own algorithms as the sweep decided among them",
        f"# use: MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={path.name} mpiexec ...",
    ]
    write_text_atomic(notes_path, "\n".join([*head, *notes]) + "\n")
    return [path, notes_path], warn


def _bound_holds(key: str, name: str, value: int) -> bool | None:
    """Whether a csel key 'NAME<=N' / 'NAME=any' holds for ``value`` (None: not NAME)."""
    if key == f"{name}=any":
        return True
    if key.startswith(f"{name}<="):
        return value <= int(key.partition("<=")[2])
    return None


# The branch of each guard (``guarded``) that a call with a built-in commutative op and a
# large count takes: the one the export's choice sits on.
_GUARD_BRANCHES = ("comm_hierarchy=parent", "is_commutative=yes", "is_op_built_in=yes", "count=any")


def _through_guards(node: dict[str, Any]) -> dict[str, Any]:
    """Below ``guarded``'s conditions, along the branch its choice sits on."""
    while isinstance(node, dict):
        branch = next((b for b in _GUARD_BRANCHES if b in node), None)
        if branch is None:
            return node
        node = node[branch]
    return node


def file_algorithm(
    tree: dict[str, Any], collective: str, nprocs: int, size: int, nodes: int = 1
) -> str | None:
    """The MPICH algorithm value (MPIR_CVAR_<COLL>_INTRA_ALGORITHM's, e.g. 'ring') that an
    exported file names for an intra-communicator ``collective`` of ``size`` bytes on
    ``nprocs`` ranks over ``nodes`` nodes, or None where it keeps MPICH's default subtree
    there. Reads the shape this export writes: ONE_NODE_KEY if any, comm_size then
    avg_msg_size keys, in file order, then the guards (for a commutative built-in op)."""
    node = tree.get(f"collective={collective}", {}).get("comm_type=intra", {})
    if ONE_NODE_KEY in node:
        node = (
            node[ONE_NODE_KEY]
            if nodes == 1
            else {k: v for k, v in node.items() if k != ONE_NODE_KEY}
        )
    for name, value in (("comm_size", nprocs), ("avg_msg_size", size)):
        keys = [k for k in node if _bound_holds(k, name, value) is not None]
        if not keys:
            return None  # MPICH's own subtree from here
        node = node[next(k for k in keys if _bound_holds(k, name, value))]
    node = _through_guards(node)
    prefix = f"algorithm=MPIR_{collective.capitalize()}_"
    if len(node) != 1 or not next(iter(node)).startswith(prefix):
        return None
    function = next(iter(node)).removeprefix(prefix)
    return "nb" if function == "allcomm_nb" else function.removeprefix("intra_")
