"""Export for NCCL's tuner plugin: the CSV file of NCCL's example tuner
(NVIDIA/nccl, ext-tuner/example: README.md and plugin.c), one rule a line::

    colltype,minbytes,maxbytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff

A line applies to a ``colltype`` call of ``minbytes..maxbytes`` bytes (both inclusive) on a
communicator of exactly ``nNodes`` nodes and ``nRanks`` ranks (-1: any), the first matching
line wins, and '#' starts a comment line. The plugin reads lines of at most 255 bytes
(MAX_LINE_LENGTH 256 with fgets): a longer comment would go on as a line of its own, so
every comment is cut to fit.

What is written: the GPU (cuda) entries of allreduce and bcast, one line per range whose
choice is an ``nccl`` variant that forces both NCCL's algorithm and protocol
(``nccl:algo=ring,proto=ll``; bcast's ``nccl:proto=ll`` runs NCCL's ring, its only
broadcast algorithm), at the nodes and ranks the entry was measured on; channels -1 (NCCL's
own count), numPipeOps and regBuff -1 (any). Nothing else can be written: ranges where MPI
or NCCL's own choice (plain ``nccl``) won keep NCCL's decision, and a choice that forces only
one of the two cannot be stated in the plugin's terms (a warning names it). A table without
such a choice still gets a file: its comments and the note that NCCL decides everywhere.
"""

from __future__ import annotations

from pathlib import Path

from osu_dl_bench import __version__
from osu_dl_bench.paths import write_atomic
from osu_dl_bench.selection.exports.common import beside, provenance_lines, range_text
from osu_dl_bench.selection.table import Choice, Entry, TuningTable

LIBRARY = "nccl"
# The files export writes beside the table (checked before any of them is written).
SUFFIXES = (".nccl_tuner.conf",)
# The collectives written, with the plugin's names for them (plugin.c, parseCollType).
COLLTYPES = {"allreduce": "allreduce", "bcast": "broadcast"}
# NCCL's only broadcast algorithm (src/device/broadcast.h): bcast variants force no algo.
BCAST_ALGORITHM = "ring"
# The plugin stores maxbytes as size_t (strtoull): the largest value is "no end".
NO_END = 2**64 - 1
ANY = -1
HEADER = "colltype,minbytes,maxbytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"
# plugin.c reads a line into char[256] with fgets: 255 bytes (not characters) and the newline.
MAX_LINE = 255
NCCL_DEVICE = "cuda"
# The file's bytes are what fgets measures: written as UTF-8 whatever the locale says.
ENCODING = "utf-8"


def forced_pair(collective: str, choice: Choice) -> tuple[str, str] | None:
    """(algorithm, protocol) an nccl choice forces, None where it forces fewer than both
    (or is not an nccl variant)."""
    if choice.backend != LIBRARY or choice.algorithm != LIBRARY:
        return None
    params = dict(choice.params)
    algo = BCAST_ALGORITHM if collective == "bcast" else params.get("algo")
    proto = params.get("proto")
    return (str(algo), str(proto)) if algo and proto else None


def _nccl_entries(table: TuningTable) -> list[Entry]:
    """The GPU entries of the collectives the plugin takes, in table order."""
    return [
        e for e in table.entries if e.key.device == NCCL_DEVICE and e.key.collective in COLLTYPES
    ]


def _entry_lines(entry: Entry, warn: list[str]) -> list[str]:
    """The entry's ranges that force an NCCL algorithm and protocol, as plugin lines (equal
    neighbours merged); other nccl choices are named in ``warn``."""
    key = entry.key
    spans: list[tuple[int, int | None, tuple[str, str]]] = []
    for size_range in entry.ranges:
        pair = forced_pair(key.collective, size_range.choice)
        choice = size_range.choice
        if pair is None:
            if choice.backend == LIBRARY and choice.algorithm == LIBRARY and choice.params:
                where = range_text(size_range.min_bytes, size_range.max_bytes)
                warn.append(
                    f"{key}, {where}: {choice.label} forces only one of NCCL's algorithm and "
                    "protocol, which the tuner plugin sets together: NCCL decides there"
                )
            continue
        if spans and spans[-1][2] == pair and spans[-1][1] == size_range.min_bytes:
            spans[-1] = (spans[-1][0], size_range.max_bytes, pair)
        else:
            spans.append((size_range.min_bytes, size_range.max_bytes, pair))
    colltype = COLLTYPES[key.collective]
    return [
        f"{colltype},{lo},{NO_END if hi is None else hi - 1},{algo},{proto},"
        f"{ANY},{key.nodes},{key.nprocs},{ANY},{ANY}"
        for lo, hi, (algo, proto) in spans
    ]


def _comment(text: str) -> str:
    """One comment line the plugin reads as one line: at most MAX_LINE bytes of UTF-8, cut
    between characters (a character cut in two is dropped whole)."""
    encoded = f"# {text}".encode(ENCODING, "backslashreplace")[:MAX_LINE]
    return encoded.decode(ENCODING, "ignore")


def tuner_text(table: TuningTable, warn: list[str], filename: str = "FILE") -> str:
    """The plugin's CSV file for ``table``: comments first, then one line per rule."""
    rules: list[str] = []
    for entry in _nccl_entries(table):
        rules += _entry_lines(entry, warn)
    if not rules:
        warn.append(
            "no GPU range of this table forces an NCCL algorithm and protocol "
            "(nccl:algo=...,proto=...): the file has no rule, NCCL decides everywhere"
        )
    comments = [
        f"NCCL tuner plugin rules (NCCL's ext-tuner/example CSV), written by osu-dl-bench "
        f"{__version__}",
        *provenance_lines(table),
        f"use: build NCCL's ext-tuner/example plugin, then NCCL_TUNER_PLUGIN=<its .so> "
        f"NCCL_TUNER_CONFIG_FILE={filename}",
        "a line applies to exactly its nNodes and nRanks (as measured), minbytes..maxbytes "
        "inclusive; channels -1 keeps NCCL's count; other sizes and shapes: NCCL decides",
        *(f"not exported: {w}" for w in warn),
        HEADER,
    ]
    return "\n".join([*(_comment(c) for c in comments), *rules]) + "\n"


def export(table: TuningTable, base: Path) -> tuple[list[Path], list[str]]:
    """Write BASE.nccl_tuner.conf; returns the path and warnings."""
    warn: list[str] = []
    path = beside(base, SUFFIXES[0])
    text = tuner_text(table, warn, path.name)
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding=ENCODING))
    return [path], warn
