"""MPICH's three selection trees as files: the home is osu_dl_bench.runtime.mpich_trees (the
sweep's launches write them, below this floor); the exports and verify-export import it
from here too."""

from osu_dl_bench.runtime.mpich_trees import (
    FALLBACK_VARIABLE,
    FILE_VARIABLES,
    LAYERS,
    GenericTrees,
    carried_trees,
    generic_trees,
    selection_files_env,
)

__all__ = [
    "FALLBACK_VARIABLE",
    "FILE_VARIABLES",
    "LAYERS",
    "GenericTrees",
    "carried_trees",
    "generic_trees",
    "selection_files_env",
]
