"""Write MPICH's ch4, POSIX and MPIR default selection trees, read from an installed
libmpi, into the package data file the suite carries (osu_dl_bench/selection/exports/
mpich_generic.json), with the MPICH version they come from.

    PYTHONPATH=$PWD python scripts/mpich_trees.py [--libmpi PATH] [--check]

--check writes nothing and exits 1 if the carried copy differs from the library's.
"""

from __future__ import annotations

import argparse
import sys
from importlib.resources import files
from pathlib import Path

from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.runtime import mpich_trees


def main(argv: list[str] | None = None) -> int:
    """Extract the trees and write (or, with --check, compare) the carried copy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libmpi", type=Path, default=mpich_trees.installed_libmpi())
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    args = parser.parse_args(argv)
    if args.libmpi is None:
        parser.error("no libmpi installed with this Python: give --libmpi PATH")
    version = mpich_trees.library_version(args.libmpi)
    if version is None:
        parser.error(f"{args.libmpi} reports no MPICH version")
    trees = mpich_trees.GenericTrees(version, mpich_trees.extract_trees(args.libmpi), "")
    text = mpich_trees.carried_document(trees)
    target = Path(str(files(mpich_trees.__package__).joinpath(mpich_trees.CARRIED)))
    if args.check:
        same = target.read_text(encoding="utf-8") == text
        print(f"{target}: {'equals' if same else 'differs from'} MPICH {version}'s trees")
        return 0 if same else 1
    write_text_atomic(target, text)
    print(f"{target}: MPICH {version}'s trees from {args.libmpi}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
