"""A module's file name says which module it is: a new module does not take a name another
module of the packages already has (two `agreement.py`, one for interval agreement
between runs and one for errors agreed between ranks, were read for each other)."""

from __future__ import annotations

from collections import defaultdict

from mpirun import REPO

PACKAGES = ("osu_dl_bench", "collectives")
# Shared today, each in two floors with a meaning of its own; renaming them is left for
# later. The list only shrinks: a name shared anew fails below.
KNOWN_SHARED = frozenset(
    {
        "bench_config.py",
        "common.py",
        "comparison.py",
        "device.py",
        "errors.py",
        "linkmap.py",
        "merge.py",
        "mpich_trees.py",
        "nccl.py",
        "progress.py",
        "ranks.py",
        "records.py",
        "report.py",
        "topology.py",
        "tune.py",
    }
)


def shared_file_names() -> dict[str, list[str]]:
    """File name -> the modules (paths) that use it, for names used by two or more."""
    paths = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name not in ("__init__.py", "__main__.py"):
                paths[path.name].append(str(path.relative_to(REPO)))
    return {name: found for name, found in sorted(paths.items()) if len(found) > 1}


def test_no_new_module_takes_a_name_another_module_has():
    shared = shared_file_names()
    new = {name: paths for name, paths in shared.items() if name not in KNOWN_SHARED}
    assert not new, f"file names used by two modules: {new}"


def test_the_known_shared_names_are_still_shared():
    # A name renamed away comes off KNOWN_SHARED, so that it cannot come back unnoticed.
    assert set(shared_file_names()) >= KNOWN_SHARED
