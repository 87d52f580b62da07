"""MPICH's own MPIR-level collective selection, the tree an exported MPICH file falls back
to wherever the table keeps native (or names an algorithm MPICH lacks).

An MPICH selection file replaces this whole tree, and MPICH asserts at MPI_Init if a
collective it needs is missing, so an export must carry every collective: ours where the
table has a choice, this default elsewhere. The tree is the MPIR layer of the copies
mpich_trees.py carries (maint/tuning/coll/mpir/generic.json, compiled into libmpi).
"""

from __future__ import annotations

from typing import Any

from osu_dl_bench.runtime.mpich_trees import carried_trees

MPICH_VERSION = carried_trees().version


def default_tree() -> dict[str, Any]:
    """A fresh copy of MPICH's default MPIR tree (callers may change it)."""
    return carried_trees().tree("mpir")
