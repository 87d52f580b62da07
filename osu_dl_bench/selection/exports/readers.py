"""Exported selection files read back: which library a file is for, and what it names
where (MPICH's selection tree through mpich.file_algorithm, Open MPI's classic rules
through openmpi.rules_algorithm), so that verify-export can check the library applied it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.exports.mpich import file_algorithm
from osu_dl_bench.selection.exports.openmpi import parse_classic, rules_algorithm

# (collective, nprocs, size in bytes) -> the library algorithm a file names there, None
# where it leaves the library's default.
Reader = Callable[[str, int, int], "str | None"]


def file_library(path: Path) -> str:
    """'mpich' (an MPICH csel JSON file) or 'openmpi' (a classic rules file), from the file."""
    if path.suffix == ".rules":
        return "openmpi"
    if path.name.endswith(".openmpi.json"):
        raise UsageError(f"{path}: give the classic .openmpi.rules file beside it (Open MPI 5)")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{path}: expected an exported .mpich.json or .openmpi.rules file ({exc})"
        ) from None
    if isinstance(data, dict) and any(str(k).startswith("collective=") for k in data):
        return "mpich"
    raise UsageError(f"{path}: not an MPICH selection file (no 'collective=' keys)")


def file_reader(path: Path, library: str) -> Reader:
    """What the file names where: MPICH's selection tree or Open MPI's classic rules."""
    text = path.read_text()
    if library == "mpich":
        tree = json.loads(text)
        return lambda collective, p, size: file_algorithm(tree, collective, p, size)
    try:
        parse_classic(text)
    except (StopIteration, ValueError):
        raise UsageError(f"{path}: not a classic Open MPI rules file") from None
    return lambda collective, p, size: rules_algorithm(text, collective, p, size)


def named_algorithms(reader: Reader, nprocs: tuple[int, ...], sizes: list[int]) -> list[str]:
    """The allreduce algorithms a file names at these process counts and sizes."""
    found = {reader("allreduce", p, s) for p in nprocs for s in sizes}
    return sorted(a for a in found if a is not None)
