"""Exported selection files read back: which library a file is for, and what it names
where (MPICH's selection tree through mpich.file_algorithm, Open MPI's classic rules
through openmpi.rules_algorithm), so that verify-export can check the library applied it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from collectives import mpich_layers, mpit
from collectives.shape import JobShape
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import UnreadableJson, load_json, read_regular_file
from osu_dl_bench.runtime.launcher import posix_pinned
from osu_dl_bench.runtime.mpich_trees import generic_trees
from osu_dl_bench.selection.exports.mpich import file_algorithm
from osu_dl_bench.selection.exports.openmpi import parse_classic, rules_algorithm

# (collective, nprocs, size in bytes) -> the library algorithm a file names there, None
# where it leaves the library's default.
Reader = Callable[[str, int, int], "str | None"]
# p -> the shape of a job of p ranks (its nodes and ranks per node).
ShapeOf = Callable[[int], JobShape]


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
# (RuntimeError: StopIteration inside a generator), a composition MPICH does not have
# (IndexError).
_DAMAGE = (
    AttributeError,
    TypeError,
    ValueError,
    KeyError,
    IndexError,
    RuntimeError,
    StopIteration,
)


def one_node(nprocs: int) -> JobShape:
    """A job of ``nprocs`` ranks on this host alone."""
    return JobShape(nprocs, 1, nprocs)


def file_reader(path: Path, library: str, shape_of: ShapeOf = one_node) -> Reader:
    """What the file names where: MPICH's selection tree or Open MPI's classic rules; a
    file neither reader can follow is one UsageError, whenever it is read. ``shape_of``:
    the nodes a job of p ranks spans (MPICH's three-file export decides by them)."""
    try:
        text = read_regular_file(path).decode("utf-8")
    except (UnreadableJson, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({exc})") from None
    if library == "mpich" and layered_files(path):
        read = layered_reader(layered_files(path), shape_of)
        kind = "MPICH's three-file export (ch4, POSIX, MPIR trees)"
    elif library == "mpich":
        tree = checked_tree(path, load_json(path))
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


def layered_files(path: Path) -> dict[str, Path]:
    """layer -> file of MPICH's three-file export whose MPIR file is ``path`` ({} for an
    older single file, or where a sibling is missing)."""
    if not path.name.endswith(mpit.MPICH_EXPORT_MPIR):
        return {}
    base = str(path)[: -len(mpit.MPICH_EXPORT_MPIR)]
    files = {"ch4": Path(base + ".mpich.ch4.json"), "posix": Path(base + ".mpich.posix.json")}
    files["mpir"] = path
    return files if all(f.is_file() for f in files.values()) else {}


def _layer_tree(path: Path) -> object:
    """One file of a three-file export, parsed; UsageError naming it where it is no JSON
    or no tree MPICH can parse (checked_tree)."""
    try:
        return checked_tree(path, load_json(path))
    except UnreadableJson as exc:
        raise UsageError(f"{path}: one of the export's three files is unreadable ({exc})") from None


def checked_tree(path: Path, tree: object) -> object:
    """``tree`` where MPICH's csel can parse it: every condition one its own generic trees
    test; else UsageError, before any launch (MPICH prints 'unknown key' and aborts every
    rank with a failed assertion, src/mpi/coll/src/csel.c)."""
    known = {"any"}.union(
        *(mpich_layers.condition_names(t) for t in generic_trees().trees.values())
    )
    try:
        unknown = sorted(mpich_layers.condition_names(tree) - known)
    except ValueError as exc:
        raise UsageError(f"{path}: not a selection tree MPICH can parse ({exc})") from None
    if unknown:
        raise UsageError(
            f"{path}: not a selection tree MPICH can parse: no condition "
            f"{', '.join(map(repr, unknown))} (its csel aborts at an unknown key; it knows "
            f"{', '.join(sorted(known))})"
        )
    return tree


def layered_reader(files: dict[str, Path], shape_of: ShapeOf = one_node) -> Reader:
    """What a three-file MPICH export names where: the path its trees make MPICH run
    (collectives.mpich_layers.call_path, host float32 sums as the clients run them, under
    this host's oversubscription setting) against the generic trees' path: None where it
    is the default's, else the layered candidate that runs that path (its native:alg
    name, so that the verifying sweep forces it and the fingerprints compare), else the
    path itself."""
    trees = {layer: _layer_tree(path) for layer, path in files.items()}
    base = generic_trees().trees

    def read(collective: str, nprocs: int, size: int) -> str | None:
        shape = shape_of(nprocs)
        pinned = posix_pinned(shape.ranks_per_node)
        call = mpich_layers.Call(
            collective, nprocs, shape.nodes, size, itemsize=4, oversubscribed=pinned
        )
        if mpich_layers.same_code(call, trees, base):
            return None
        for cand in mpich_layers.candidates(collective):
            if mpich_layers.same_code(call, mpich_layers.candidate_trees(cand, base), trees):
                return cand.alg
        return mpich_layers.path_text(call, trees)

    return read
