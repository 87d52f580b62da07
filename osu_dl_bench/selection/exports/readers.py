"""Exported selection files read back: which library a file is for, and what it names
where (MPICH's selection tree through mpich.file_algorithm, Open MPI's classic rules
through openmpi.rules_algorithm), so that verify-export can check the library applied it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from collectives import mpit
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import UnreadableJson, load_json, read_regular_file
from osu_dl_bench.selection.exports.mpich import file_algorithm
from osu_dl_bench.selection.exports.openmpi import parse_classic, rules_algorithm

# (collective, nprocs, size in bytes) -> the library algorithm a file names there, None
# where it leaves the library's default.
Reader = Callable[[str, int, int], "str | None"]


def file_library(path: Path) -> str:
    """'mpich' (an MPICH csel JSON file) or 'openmpi' (a classic rules file), from the file."""
    if path.name.endswith(".openmpi.json"):
        raise UsageError(f"{path}: give the classic .openmpi.rules file beside it (Open MPI 5)")
    if mpit.selection_file_library(str(path)) == "openmpi":
        return "openmpi"
    try:
        data = load_json(path)
    except UnreadableJson as exc:
        raise UsageError(
            f"{path}: expected an exported .mpich.json or .openmpi.rules file ({exc})"
        ) from None
    if isinstance(data, dict) and any(str(k).startswith("collective=") for k in data):
        return "mpich"
    raise UsageError(f"{path}: not an MPICH selection file (no 'collective=' keys)")


# What a hand-edited file can make the readers meet: a string where an object belongs
# (AttributeError), 'comm_size<=abc' (ValueError), a count past the numbers the rules hold
# (RuntimeError: StopIteration inside a generator).
_DAMAGE = (AttributeError, TypeError, ValueError, KeyError, RuntimeError, StopIteration)


def file_reader(path: Path, library: str) -> Reader:
    """What the file names where: MPICH's selection tree or Open MPI's classic rules; a
    file neither reader can follow is one UsageError, whenever it is read."""
    try:
        text = read_regular_file(path).decode("utf-8")
    except (UnreadableJson, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({exc})") from None
    if library == "mpich":
        tree = load_json(path)
        read = lambda collective, p, size: file_algorithm(tree, collective, p, size)  # noqa: E731
        kind = "an MPICH selection tree as export writes it"
    else:
        try:
            parse_classic(text)
        except _DAMAGE:
            raise UsageError(f"{path}: not a classic Open MPI rules file") from None
        read = lambda collective, p, size: rules_algorithm(text, collective, p, size)  # noqa: E731
        kind = "a classic Open MPI rules file"

    def reader(collective: str, nprocs: int, size: int) -> str | None:
        try:
            return read(collective, nprocs, size)
        except _DAMAGE:
            raise UsageError(
                f"{path}: not {kind} (it cannot be followed for {collective} on {nprocs} "
                f"ranks at {size} bytes)"
            ) from None

    return reader


def named_algorithms(reader: Reader, nprocs: tuple[int, ...], sizes: list[int]) -> list[str]:
    """The allreduce algorithms a file names at these process counts and sizes."""
    found = {reader("allreduce", p, s) for p in nprocs for s in sizes}
    return sorted(a for a in found if a is not None)
