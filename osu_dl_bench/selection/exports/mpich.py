"""Export for MPICH's collective selection: three files, one per layer where MPICH decides
(collectives/mpich_layers.py): BASE.mpich.ch4.json (ch4's compositions,
MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE), BASE.mpich.posix.json (the shared-memory
layer, MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE) and BASE.mpich.mpir.json (MPIR,
MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE); grammar in MPICH's src/mpi/coll/src/csel.c.
Each is MPICH's generic tree of its layer (runtime/mpich_trees.py) with the sweep's
decisions of that layer in it; the ch4 and POSIX trees keep MPICH's generic subtree
wherever the sweep kept the default, and MPICH falls back to the layer below where they
do not match; the MPIR tree is complete (MPICH asserts a match).

The MPIR file replaces MPICH's whole MPIR-level tree, so it is MPICH's default tree
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
from dataclasses import replace
from pathlib import Path
from typing import Any

from collectives import mpich_layers
from collectives.registry import counterpart
from collectives.units import format_size
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.runtime.mpich_trees import FALLBACK_VARIABLE, FILE_VARIABLES, carried_trees
from osu_dl_bench.selection.exports.common import (
    LIBRARY_TUNING as LIBRARY_TUNING_FIELD,
)
from osu_dl_bench.selection.exports.common import (
    Rule,
    SweptEntry,
    beside,
    comm_bounds,
    entries_per_comm_size,
    library_rules,
    range_text,
    shell_word,
    swept_entries,
    swept_rules,
)
from osu_dl_bench.selection.exports.mpich_default import default_tree
from osu_dl_bench.selection.table import Choice, TuningTable

LIBRARY = "mpich"
# The files export writes beside the table, one per layer, the notes only where the sweep
# measured MPICH's own candidates (all checked before any file is written).
LAYER_SUFFIXES = {layer: f".mpich.{layer}.json" for layer in mpich_layers.LAYERS}
NOTES_SUFFIX = ".mpich.notes.txt"
SUFFIXES = (*LAYER_SUFFIXES.values(), NOTES_SUFFIX)
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


def layer_of(alg: str) -> tuple[str, str] | None:
    """(layer, choice) of a library candidate's ``alg`` ('ch4_beta' -> ('ch4', 'beta'),
    'posix_mpir' -> ('posix', 'mpir'), 'mpir_ring' -> ('mpir', 'ring')); an older run's
    MPIR CVAR value ('ring') is MPIR's; None for the default ('auto')."""
    if alg == MPICH_AUTO:
        return None
    for layer in ("ch4", "posix", "mpir"):
        if alg.startswith(f"{layer}_"):
            return layer, alg.removeprefix(f"{layer}_")
    return "mpir", alg


MPICH_AUTO = "auto"


def mpir_algorithm(collective: str, alg: str) -> str | None:
    """The MPIR function MPICH's selection file names for a forced algorithm
    (MPIR_CVAR_<COLL>_INTRA_ALGORITHM value ``alg``), or None where the file cannot say it:
    the POSIX layer's choices (another file), algorithms needing parameters."""
    layer, alg = layer_of(alg) or ("mpir", alg)
    if layer != "mpir":
        return None
    coll = collective.capitalize()
    name = f"MPIR_{coll}_allcomm_nb" if alg == "nb" else f"MPIR_{coll}_intra_{alg}"
    return None if name in NEEDS_PARAMETERS else name


def _layer_target(layer: str, collective: str, alg: str) -> str | None:
    """What ``layer``'s file writes for a swept ``alg``: MPICH_DECIDES for another layer's
    candidate (that layer's file carries it), None where this layer cannot say it."""
    found = layer_of(alg)
    if found is None or found[0] != layer:
        return MPICH_DECIDES
    if layer == "mpir":
        return mpir_algorithm(collective, alg)
    if layer == "ch4":
        return found[1] if found[1] in mpich_layers.COMPOSITIONS[collective] else None
    return found[1] if found[1] == "mpir" else None


def _swept_tree(
    collective: str,
    entries: list[SweptEntry],
    default_intra: dict[str, Any],
    warn: list[str],
    layer: str = "mpir",
) -> tuple[dict[str, Any], list[str]]:
    """comm_size keys over the library's own decisions of ``layer``; and a note line per
    rule (the MPIR file's every rule, the other files' departures)."""
    tree, notes = {}, []
    bounds = comm_bounds([e.nprocs for e in entries])
    for bound, entry in zip(bounds, entries, strict=True):
        rules = swept_rules(
            entry,
            lambda alg: _layer_target(layer, collective, alg),
            MPICH_DECIDES,
            warn,
            "MPICH",
            collective,
        )
        key = "comm_size=any" if bound.hi is None else f"comm_size<={bound.hi}"
        tree[key] = _size_tree(collective, rules, default_intra, layer)
        notes += [
            f"{layer}: {collective} {key} {range_text(r.min_bytes, r.max_bytes)} -> "
            f"{r.target}: {r.note}"
            for r in rules
            if layer == "mpir" or r.target != MPICH_DECIDES
        ]
    return tree, notes


# The guards MPICH needs around an MPIR algorithm (op, count, parent communicator) are
# mpich_layers.guarded's, which the sweep's candidate trees use too.
guarded = mpich_layers.guarded


def _size_tree(
    collective: str, rules: list[Rule], default_intra: dict[str, Any], layer: str = "mpir"
) -> dict[str, Any]:
    """avg_msg_size<=M keys (M = range end - 1, MPICH compares inclusively), last =any.
    The ch4 tree takes them at the generic subtree's leaves instead (_split_at_leaves)."""
    if layer == "ch4":
        if all(rule.target == MPICH_DECIDES for rule in rules):
            return copy.deepcopy(default_intra)
        return _split_at_leaves(default_intra, lambda leaf: _ch4_sizes(collective, rules, leaf))
    tree = {}
    for rule in rules:
        last = rule.max_bytes is None
        key = "avg_msg_size=any" if last else f"avg_msg_size<={rule.max_bytes - 1}"
        if rule.target == MPICH_DECIDES:
            tree[key] = copy.deepcopy(default_intra)
        elif layer == "ch4":
            tree[key] = mpich_layers.composition_subtree(collective, rule.target, default_intra)
        elif layer == "posix":
            tree[key] = mpich_layers.posix_to_mpir(mpich_layers.first_leaf(default_intra))
        else:
            tree[key] = guarded(collective, rule.target, default_intra)
    return tree


def _ch4_sizes(collective: str, rules: list[Rule], leaf: dict[str, Any]) -> dict[str, Any]:
    """One generic leaf's size split: the leaf where MPICH decides, the rule's composition
    (under the conditions MPICH names it under, the leaf elsewhere) where it departs."""
    tree = {}
    for rule in rules:
        key = (
            "avg_msg_size=any" if rule.max_bytes is None else f"avg_msg_size<={rule.max_bytes - 1}"
        )
        tree[key] = (
            copy.deepcopy(leaf)
            if rule.target == MPICH_DECIDES
            else mpich_layers.composition_subtree(collective, rule.target, leaf)
        )
    return tree


def _split_at_leaves(node: dict[str, Any], split: Any) -> dict[str, Any]:
    """``node`` (MPICH's generic subtree) with each leaf (a one-key composition or algorithm
    node) replaced by ``split(leaf)``: the comm conditions stay in front, where MPICH prunes
    them once per communicator (MPIR_Csel_prune, src/mpi/coll/src/csel.c, stops at the first
    message-size node), so a call at a size the export leaves to MPICH walks the generic
    tree's pruned path and one size split. At p = 2, bcast 8-64 B, a split in front of the
    subtree measured 1.04-1.06x the generic tree's time, at the leaves 1.02-1.04x: any size
    node left after pruning costs a few percent there
    (results/bcast_small_sizes_tree_shape_p2.txt)."""
    if _is_leaf(node):
        return split(node)
    return {key: _split_at_leaves(child, split) for key, child in node.items()}


def _is_leaf(node: Any) -> bool:
    """A one-key composition or algorithm node."""
    return (
        isinstance(node, dict)
        and len(node) == 1
        and next(iter(node)).startswith(("composition=", "algorithm="))
    )


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
    layer: str = "mpir",
) -> dict[str, Any] | None:
    """The comm_size tree of the entries in ``scope``: MPICH's own candidates of ``layer``
    as the sweep decided among them where it measured them, else (MPIR only) the table's
    choices' counterparts."""
    swept = swept_entries(table, LIBRARY, collective, warn if layer == "mpir" else [], scope)
    if swept is None:
        if layer != "mpir":
            return None
        return _intra_tree(collective, table, default_intra, warn, scope)
    intra, lines = _swept_tree(collective, swept, default_intra, warn, layer)
    notes.extend(lines)
    return intra


def _measured_on_several_nodes(table: TuningTable, collective: str) -> bool:
    entries = [e.key for e in table.entries if e.key.collective == collective]
    return any(key.nodes > 1 for key in entries)


def document(
    table: TuningTable,
    warn: list[str],
    notes: list[str] | None = None,
    layer: str = "mpir",
) -> dict[str, Any]:
    """MPICH's generic tree of ``layer`` with the table's collectives in it: MPICH's own
    candidates of that layer as the sweep decided among them where it measured them
    (``notes`` gets what was measured for each rule), else (MPIR) the counterparts of the
    table's choices. A table measured on several nodes keys its one-node entries on
    ONE_NODE_KEY (MPICH's generic subtree where it has none) and its several-node entries
    after it; the POSIX layer, which runs on one node's ranks, takes one-node entries only."""
    notes = notes if notes is not None else []
    tree = layer_default(layer)
    for collective in COLLECTIVES:
        branch = tree.get(f"collective={collective}")
        if not branch or "comm_type=intra" not in branch:
            continue
        default_intra = branch["comm_type=intra"]
        args = (collective, table, default_intra, warn, notes)
        if not _measured_on_several_nodes(table, collective):
            intra = _scoped_tree(*args, None, layer)
        else:
            one = _scoped_tree(*args, "one", layer)
            several = _scoped_tree(*args, "many", layer) if layer != "posix" else None
            if one is None and several is None:
                continue
            one = one if one is not None else copy.deepcopy(default_intra)
            intra = {ONE_NODE_KEY: one, **(several or {"comm_size=any": default_intra})}
        if intra is not None:
            branch["comm_type=intra"] = intra
    return tree


def layer_default(layer: str) -> dict[str, Any]:
    """A fresh copy of MPICH's generic tree of ``layer`` (the carried one)."""
    return default_tree() if layer == "mpir" else carried_trees().tree(layer)


def documents(
    table: TuningTable, warn: list[str], notes: list[str] | None = None
) -> dict[str, dict[str, Any]]:
    """The three files' trees, by layer (document of each)."""
    return {layer: document(table, warn, notes, layer) for layer in mpich_layers.LAYERS}


def environment_lines(paths: dict[str, Path]) -> list[str]:
    """The environment that loads the three files (FALLBACK=error: a choice MPICH cannot
    apply fails the call instead of running another algorithm)."""
    lines = [f"{FILE_VARIABLES[layer]}={shell_word(paths[layer])}" for layer in mpich_layers.LAYERS]
    return [*lines, f"{FALLBACK_VARIABLE}=error"]


def path_proofs(table: TuningTable, trees: dict[str, dict[str, Any]]) -> list[str]:
    """Per collective, comm size and measured size of the sweep's MPICH entries: the code
    MPICH runs there with the exported files against its default's (mpich_layers.call_path
    over the files' trees and the generic ones), under the run's oversubscription setting."""
    tuning = table.header.get(LIBRARY_TUNING_FIELD) or {}
    if tuning.get("library") != LIBRARY:
        return []
    oversubscribed = bool(tuning.get("mpich_posix_cvars"))
    base = {layer: layer_default(layer) for layer in mpich_layers.LAYERS}
    lines = []
    for item in tuning.get("entries") or []:
        if item["collective"] not in COLLECTIVES or item["device"] != "cpu":
            continue
        for size_range in item["ranges"]:
            for point in size_range.get("points") or []:
                call = mpich_layers.Call(
                    item["collective"],
                    int(item["nprocs"]),
                    int(item["nodes"]),
                    int(point["size_bytes"]),
                    oversubscribed=oversubscribed,
                )
                exported = mpich_layers.path_text(call, trees)
                default = mpich_layers.path_text(call, base)
                if mpich_layers.same_code(call, trees, base):
                    same = "the default's path" if exported == default else "the default's code"
                else:
                    same = f"default: {default}"
                seen = _fingerprint_text(tuning, call, size_range["alg"])
                if seen.endswith("the same as the default's") and _fingerprint_blind(
                    call, trees, base
                ):
                    seen += _BLIND
                lines.append(
                    f"proof: {call.collective} p={call.nprocs} nodes={call.nodes} "
                    f"{format_size(call.nbytes)} {size_range['alg']}: {exported} ({same}){seen}"
                )
    return lines


# MPICH's trees route a user-defined op (the fingerprint's) apart from a built-in one:
# MPIR's reduce_scatter_allgather needs a built-in op, so the default's tree runs
# recursive doubling for it (maint/tuning/coll/mpir/generic.json).
_BLIND = " (its user-defined op runs the same code with and without the file: it cannot tell)"


def _fingerprint_blind(
    call: mpich_layers.Call, trees: mpich_layers.Trees, base: mpich_layers.Trees
) -> bool:
    """Whether the fingerprint's own call (a user-defined op) runs the same code under
    ``trees`` and ``base`` where the measured call (a built-in op) does not."""
    fingerprint = replace(call, built_in_op=False)  # Op.Create(commute=True), collectives.mpit
    return mpich_layers.same_code(fingerprint, trees, base) and not mpich_layers.same_code(
        call, trees, base
    )


def _fingerprint_text(tuning: dict[str, Any], call: mpich_layers.Call, alg: str) -> str:
    """'; fingerprint differs from the default's' (or 'the same as') where the sweep
    recorded both at this size: the run-time half of the proof (collectives.mpit's
    non-associative reduction; at p = 2 it tells apart only the compositions that reduce
    on node_comm, since a user-defined op never takes release_gather)."""
    if call.collective != "allreduce" or alg == MPICH_AUTO:
        return ""
    groups = (tuning.get("fingerprints") or {}).get(str(call.nprocs)) or {}
    mine = (groups.get(f"alg_{alg}") or {}).get(str(call.nbytes))
    default = (groups.get("mpi") or {}).get(str(call.nbytes))
    if mine is None or default is None:
        return ""
    return f"; fingerprint {'the same as' if mine == default else 'differs from'} the default's"


def export(table: TuningTable, base: Path) -> tuple[list[Path], list[str]]:
    """Write BASE.mpich.{ch4,posix,mpir}.json and BASE.mpich.notes.txt (the environment
    lines that load the files, what was measured for each rule and each measured size's
    path proof, since JSON has no comments); returns the paths and warnings."""
    warn: list[str] = []
    notes: list[str] = []
    trees = documents(table, warn, notes)
    paths = {layer: beside(base, suffix) for layer, suffix in LAYER_SUFFIXES.items()}
    for layer, path in paths.items():
        write_text_atomic(path, json.dumps(trees[layer], indent=1) + "\n")
    tuning = table.header.get(LIBRARY_TUNING_FIELD) or {}
    setting = tuning.get("mpich_posix_cvars")
    names = {layer: Path(path.name) for layer, path in paths.items()}
    head = [
        "# MPICH's selection, one file per layer (ch4 composition, POSIX shared memory, MPIR)",
        f"# use: {' '.join(environment_lines(names))} mpiexec ...",
        f"# measured under: {setting or 'no oversubscription setting (the POSIX layer free)'}",
    ]
    head += [f"# not measured: {text}" for text in tuning.get("not_measured") or []]
    notes_path = beside(base, NOTES_SUFFIX)
    write_text_atomic(notes_path, "\n".join([*head, *notes, *path_proofs(table, trees)]) + "\n")
    return [*paths.values(), notes_path], warn


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
