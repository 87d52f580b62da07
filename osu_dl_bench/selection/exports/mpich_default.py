"""MPICH's own MPIR-level collective selection, the tree an exported MPICH file falls back
to wherever the table keeps native (or names an algorithm MPICH lacks).

An MPICH selection file replaces this whole tree, and MPICH asserts at MPI_Init if a
collective it needs is missing, so an export must carry every collective: ours where the
table has a choice, this default elsewhere. Copied from MPICH 5.0.2 (maint/tuning/coll/mpir/
generic.json, compiled into libmpi as MPII_coll_generic_json) into the package data file
mpich_generic.json; MPICH is distributed under its BSD-style license, copyright UChicago
Argonne, LLC and the MPICH authors.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

MPICH_VERSION = "5.0.2"
TREE_FILE = "mpich_generic.json"


def default_tree() -> dict[str, Any]:
    """A fresh copy of MPICH's default tree (callers may change it)."""
    return json.loads(files(__package__).joinpath(TREE_FILE).read_text(encoding="utf-8"))
