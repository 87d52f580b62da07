"""MPICH's three selection trees (ch4 composition, ch4 POSIX shared memory, MPIR), as
files MPICH loads, and the environment that loads them.

Where MPICH decides (MPICH 5.0.x): ``MPIR_Bcast``/``MPIR_Allreduce`` call the device's
collective, which picks a *composition* from the ch4 tree (src/mpid/ch4/src/ch4_coll.h,
default maint/tuning/coll/ch4/generic.json); a composition runs the shared-memory layer's
choice, picked from the POSIX tree (src/mpid/ch4/shm/posix/posix_coll.h, default
maint/tuning/coll/posix/generic.json), which falls back to MPIR's own selection
(src/mpi/coll/src/csel.c, default maint/tuning/coll/mpir/generic.json) where no POSIX
algorithm applies. MPICH installs none of the three as files: each is compiled into libmpi
as one JSON string, which ``extract_trees`` reads back. The copies carried here as package
data (``CARRIED``, with the MPICH version they come from) serve where no MPICH is installed;
``scripts/mpich_trees.py`` writes them again from an installed library. MPICH is
distributed under its BSD-style license, copyright UChicago Argonne, LLC and the MPICH
authors.

Each tree replaces MPICH's default of its layer when its variable names a file (read at
MPI_Init: ch4_init.c, posix_init.c, coll_impl.c). The MPIR tree must be complete (MPICH
asserts a match: ``MPIR_Assert(cnt)``), the ch4 and POSIX trees may be partial (no match
falls back to the layer below).
"""

from __future__ import annotations

import ctypes
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from collectives import mpich_layers
from osu_dl_bench.errors import UsageError
from osu_dl_bench.paths import write_text_atomic

# The three layers, in the order a call reaches them.
LAYERS = mpich_layers.LAYERS
FILE_VARIABLES = mpich_layers.FILE_VARIABLES
FALLBACK_VARIABLE = mpich_layers.FALLBACK_VARIABLE
FALLBACK_ERROR = "error"
# The package data file: {"mpich_version": ..., "trees": {layer: tree}}.
CARRIED = "mpich_generic.json"
# How each layer's leaves start: a ch4 tree names compositions, a POSIX tree the POSIX
# layer's algorithms, the MPIR tree MPIR's (the compiled-in strings are told apart so).
_LEAF_MARKS = {
    "ch4": '"composition=MPIDI_',
    "posix": '"algorithm=MPIDI_POSIX_',
    "mpir": '"algorithm=MPIR_',
}
# A compiled-in tree: a NUL-terminated JSON string that opens with a collective's key.
_TREE_STRING = re.compile(rb'\{"collective=[^\x00]*')


@dataclass(frozen=True)
class GenericTrees:
    """MPICH's three default trees, the MPICH version and where they were read from."""

    version: str
    trees: dict[str, dict[str, Any]]
    source: str

    def tree(self, layer: str) -> dict[str, Any]:
        """A fresh copy of one layer's tree (callers may change it)."""
        return json.loads(json.dumps(self.trees[_checked_layer(layer)]))


def _checked_layer(layer: str) -> str:
    if layer not in LAYERS:
        raise UsageError(f"MPICH layer {layer!r}: expected one of {', '.join(LAYERS)}")
    return layer


def _layer_of(text: str) -> str | None:
    found = [layer for layer, mark in _LEAF_MARKS.items() if mark in text]
    return found[0] if len(found) == 1 else None


def extract_trees(libmpi: Path) -> dict[str, dict[str, Any]]:
    """The ch4, POSIX and MPIR trees compiled into ``libmpi`` (UsageError if it does not
    hold exactly one of each)."""
    data = Path(libmpi).read_bytes()
    found: dict[str, list[dict[str, Any]]] = {layer: [] for layer in LAYERS}
    for match in _TREE_STRING.finditer(data):
        text = match.group(0).decode("utf-8", errors="replace")
        layer = _layer_of(text)
        if layer is not None:
            found[layer].append(json.loads(text))
    counts = {layer: len(trees) for layer, trees in found.items()}
    if any(count != 1 for count in counts.values()):
        raise UsageError(
            f"{libmpi}: expected one compiled-in selection tree per MPICH layer, found {counts}"
        )
    return {layer: trees[0] for layer, trees in found.items()}


def library_version(libmpi: Path) -> str | None:
    """The MPICH version ``libmpi`` reports (MPI_Get_library_version, callable before
    MPI_Init), or None for another library or one that cannot be loaded here."""
    try:
        lib = ctypes.CDLL(str(libmpi))
        text = ctypes.create_string_buffer(8192)
        length = ctypes.c_int()
        if lib.MPI_Get_library_version(text, ctypes.byref(length)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    match = re.search(r"MPICH Version:\s*(\S+)", text.value.decode(errors="replace"))
    return match.group(1) if match else None


def installed_libmpi() -> Path | None:
    """The libmpi of the MPICH installed with this Python (the mpich wheel puts it in
    ``sys.prefix``/lib), or None."""
    found = sorted(Path(sys.prefix, "lib").glob("libmpi.so.*"))
    return found[0] if found else None


@cache
def carried_trees() -> GenericTrees:
    """The trees carried as package data, with the MPICH version they come from."""
    text = files(__package__).joinpath(CARRIED).read_text(encoding="utf-8")
    data = json.loads(text)
    return GenericTrees(data["mpich_version"], data["trees"], f"package data {CARRIED}")


@cache
def installed_trees() -> GenericTrees | None:
    """The trees of the installed MPICH (``installed_libmpi``), or None without one."""
    libmpi = installed_libmpi()
    version = library_version(libmpi) if libmpi is not None else None
    if libmpi is None or version is None:
        return None
    return GenericTrees(version, extract_trees(libmpi), str(libmpi))


def generic_trees() -> GenericTrees:
    """MPICH's default trees: the installed MPICH's where there is one, else the carried."""
    return installed_trees() or carried_trees()


def carried_document(trees: GenericTrees) -> str:
    """The package data file's text for ``trees`` (what ``scripts/mpich_trees.py`` writes)."""
    return json.dumps({"mpich_version": trees.version, "trees": trees.trees}, indent=1) + "\n"


# The file names selection_files_env writes, one per layer.
FILE_NAMES = {layer: f"mpich.{layer}.json" for layer in LAYERS}


def selection_files_env(
    directory: Path,
    ch4: dict[str, Any] | None = None,
    posix: dict[str, Any] | None = None,
    mpir: dict[str, Any] | None = None,
    *,
    fallback: str = FALLBACK_ERROR,
    base: GenericTrees | None = None,
) -> dict[str, str]:
    """Write the three trees into ``directory`` (MPICH's generic one of a layer given as
    None, the given tree otherwise) and return the environment that loads them, with
    ``MPIR_CVAR_COLLECTIVE_FALLBACK=fallback``. ``base`` overrides ``generic_trees()``."""
    base = base or generic_trees()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    given = {"ch4": ch4, "posix": posix, "mpir": mpir}
    env = {}
    for layer in LAYERS:
        tree = given[layer] if given[layer] is not None else base.tree(layer)
        path = (directory / FILE_NAMES[layer]).resolve()
        write_text_atomic(path, json.dumps(tree, indent=1) + "\n")
        env[FILE_VARIABLES[layer]] = str(path)
    env[FALLBACK_VARIABLE] = fallback
    return env


# Names, in a launch's environment, the layered candidates its files load
# ('allreduce=ch4_beta,bcast=ch4_beta'): the launch checks it against what it was asked to
# measure (mpit.forcing_problem).
CANDIDATES_VARIABLE = mpich_layers.CANDIDATES_VARIABLE


def candidate_trees(forced: Mapping[str, str], base: GenericTrees) -> dict[str, dict[str, Any]]:
    """MPICH's generic trees with each collective's candidate (collective -> alg) applied;
    two candidates of one layer change that layer's tree in two collectives."""
    trees = {layer: base.tree(layer) for layer in LAYERS}
    for collective, alg in sorted(forced.items()):
        cand = mpich_layers.candidate(collective, alg)
        trees[cand.layer] = mpich_layers.changed_tree(cand, trees)
    return trees


def candidate_files_env(
    directory: Path, forced: Mapping[str, str], base: GenericTrees | None = None
) -> dict[str, str]:
    """selection_files_env of the trees ``forced`` (collective -> alg) loads, and the
    variable naming them; the generic trees alone where ``forced`` is empty."""
    base = base or generic_trees()
    trees = candidate_trees(forced, base)
    env = selection_files_env(directory, **trees, base=base)
    if forced:
        env[CANDIDATES_VARIABLE] = mpich_layers.candidates_text(forced)
    return env
