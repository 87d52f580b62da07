"""MPICH's three default selection trees as files: the carried copies are the installed
library's, and one function writes them and names the environment that loads them."""

import json
from pathlib import Path

import pytest

from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime import mpich_trees
from osu_dl_bench.runtime.mpich_trees import (
    FALLBACK_VARIABLE,
    FILE_VARIABLES,
    LAYERS,
    carried_trees,
    extract_trees,
    selection_files_env,
)
from osu_dl_bench.selection.exports.mpich_default import default_tree


def test_the_carried_trees_equal_the_installed_mpichs_of_the_same_version():
    installed = mpich_trees.installed_trees()
    if installed is None:
        pytest.skip("no MPICH installed with this Python")
    carried = carried_trees()
    if installed.version != carried.version:
        pytest.skip(f"installed MPICH {installed.version}, carried {carried.version}")
    assert installed.trees == carried.trees


def test_each_carried_tree_is_its_layers():
    trees = carried_trees()
    ch4, posix, mpir = (json.dumps(trees.tree(layer)) for layer in LAYERS)
    assert "composition=MPIDI_Allreduce_intra_composition_gamma" in ch4
    assert "algorithm=MPIDI_POSIX_mpi_bcast_release_gather" in posix
    assert "algorithm=MPIR_Allreduce_intra_recursive_doubling" in mpir
    assert default_tree() == trees.tree("mpir")


def test_a_library_with_two_trees_of_one_layer_is_refused(tmp_path):
    tree = b'{"collective=bcast":{"composition=MPIDI_Bcast_intra_composition_alpha":{}}}'
    posix = b'{"collective=bcast":{"algorithm=MPIDI_POSIX_mpi_bcast_release_gather":{}}}'
    mpir = b'{"collective=bcast":{"algorithm=MPIR_Bcast_intra_binomial":{}}}'
    fake = tmp_path / "libmpi.so.12"
    fake.write_bytes(b"\x7fELF\x00" + b"\x00".join([tree, posix, mpir]) + b"\x00")
    assert extract_trees(fake)["posix"] == json.loads(posix)
    fake.write_bytes(b"\x00".join([tree, tree, posix, mpir]) + b"\x00")
    with pytest.raises(UsageError, match="one compiled-in selection tree per MPICH layer"):
        extract_trees(fake)


def test_selection_files_env_writes_the_generic_trees_and_a_given_one(tmp_path):
    posix = {"collective=bcast": {"comm_type=inter": {}}}
    env = selection_files_env(tmp_path / "files", posix=posix, base=carried_trees())
    assert set(env) == {*FILE_VARIABLES.values(), FALLBACK_VARIABLE}
    assert env[FALLBACK_VARIABLE] == "error"
    loaded = {layer: json.loads(Path(env[FILE_VARIABLES[layer]]).read_text()) for layer in LAYERS}
    assert loaded["posix"] == posix
    assert loaded["ch4"] == carried_trees().tree("ch4")
    assert loaded["mpir"] == carried_trees().tree("mpir")
