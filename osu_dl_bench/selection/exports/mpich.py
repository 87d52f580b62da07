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
from osu_dl_bench.selection.exports.common import (
    Rule,
    comm_bounds,
    entries_per_comm_size,
    library_rules,
)
from osu_dl_bench.selection.exports.mpich_default import default_tree
from osu_dl_bench.selection.table import Choice, TuningTable

LIBRARY = "mpich"
# The collectives this export writes; the others keep MPICH's default subtrees.
COLLECTIVES = ("allreduce", "bcast")
MPICH_DECIDES = "MPICH default"


def _target(collective: str, choice: Choice) -> tuple[str, str] | None:
    """The MPIR algorithm of a choice, or None if MPICH has no counterpart of it."""
    found = counterpart(collective, choice.algorithm, LIBRARY) if choice.backend == "mpi" else None
    if found is None or not found.exported:
        return None
    return found.name, choice.label


def _size_tree(rules: list[Rule], default_intra: dict[str, Any]) -> dict[str, Any]:
    """avg_msg_size<=M keys (M = range end - 1, MPICH compares inclusively), last =any."""
    tree = {}
    for rule in rules:
        last = rule.max_bytes is None
        key = "avg_msg_size=any" if last else f"avg_msg_size<={rule.max_bytes - 1}"
        if rule.target == MPICH_DECIDES:
            tree[key] = copy.deepcopy(default_intra)
        else:
            tree[key] = {f"algorithm={rule.target}": {}}
    return tree


def _intra_tree(
    collective: str, table: TuningTable, default_intra: dict[str, Any], warn: list[str]
) -> dict[str, Any] | None:
    """comm_size<=N keys (bounds of the nearest-entry rule), last =any; None if no entry."""
    entries = entries_per_comm_size(table, collective, warn)
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
        tree[key] = _size_tree(rules, default_intra)
    return tree


def document(table: TuningTable, warn: list[str]) -> dict[str, Any]:
    """MPICH's default tree with the table's collectives in it."""
    tree = default_tree()
    for collective in COLLECTIVES:
        branch = tree[f"collective={collective}"]
        intra = _intra_tree(collective, table, branch["comm_type=intra"], warn)
        if intra is not None:
            branch["comm_type=intra"] = intra
    return tree


def export(table: TuningTable, base: Path) -> tuple[list[Path], list[str]]:
    """Write BASE.mpich.json; returns the path and warnings."""
    warn: list[str] = []
    path = base.with_name(base.name + ".mpich.json")
    path.write_text(json.dumps(document(table, warn), indent=1) + "\n")
    return [path], warn
