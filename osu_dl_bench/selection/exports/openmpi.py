"""Export for Open MPI's coll/tuned component: the classic dynamic-rules file and the
Open MPI 6.0 JSON form (formats and ids: Open MPI's coll_tuned_dynamic_file.c and
coll_base_functions.h).

Only algorithms Open MPI has are exported, as each declares its Open MPI counterpart where
it registers (``Algorithm.equivalents["openmpi"]``: id, name, fan-in/out and the parameter
giving the segment size); anything else (and native) becomes algorithm 0, which lets Open
MPI's fixed decision choose. Classic-file semantics
(Open MPI 5.x): a rule for comm size N applies from N up to the next listed size, the
first row of every size list starts at message size 0, and a row applies from its message
size up to the next row. The comm sizes written reproduce the selector's nearest-entry
rule (see common.comm_bounds).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collectives.registry import counterpart
from osu_dl_bench import __version__
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.selection.exports.common import (
    CommBounds,
    Rule,
    beside,
    comm_bounds,
    entries_per_comm_size,
    library_rules,
    provenance_lines,
    range_text,
    shell_word,
    swept_entries,
    swept_rules,
)
from osu_dl_bench.selection.table import Choice, TuningTable

LIBRARY = "openmpi"
# The files export writes beside the table (checked before any of them is written).
SUFFIXES = (".openmpi.rules", ".openmpi.json")
# The collectives this export writes, with their COLLTYPE ids (coll_base_functions.h).
COLLECTIVE_IDS = {"allreduce": 2, "bcast": 7}
OPEN_MPI_DECIDES = (0, "ignore")


def _target(collective: str, choice: Choice) -> tuple[tuple[int, str, int, int], str] | None:
    """(alg id, alg name, fan-in/out, segment size) for a choice, or None if Open MPI has no
    counterpart of it."""
    found = counterpart(collective, choice.algorithm, LIBRARY) if choice.backend == "mpi" else None
    if found is None or not found.exported or found.id is None:
        return None
    segsize = int(dict(choice.params).get(found.segment, 0)) if found.segment else 0
    return (found.id, found.name, found.fanout, segsize), choice.label


# coll/tuned's algorithm ids by name (the values of coll_tuned_<coll>_algorithm, Open MPI
# 5.0's ompi/mca/coll/tuned/coll_tuned_allreduce_decision.c and coll_tuned_bcast_decision.c),
# for the library's own algorithms a sweep forced by name.
ALGORITHM_IDS = {
    "allreduce": {
        "basic_linear": 1,
        "nonoverlapping": 2,
        "recursive_doubling": 3,
        "ring": 4,
        "segmented_ring": 5,
        "rabenseifner": 6,
        "allgather_reduce": 7,
    },
    "bcast": {
        "basic_linear": 1,
        "chain": 2,
        "pipeline": 3,
        "split_binary_tree": 4,
        "binary_tree": 5,
        "binomial": 6,
        "knomial": 7,
        "scatter_allgather": 8,
        "scatter_allgather_ring": 9,
    },
}


def _swept_target(collective: str, alg: str) -> tuple[int, str, int, int] | None:
    """(id, name, fan-in/out, segment size) of a forced algorithm (by name or id): Open MPI's
    own defaults for fan-out and segments, as the forced runs had them."""
    ids = ALGORITHM_IDS[collective]
    if alg.isdigit() and int(alg) in ids.values():
        name = next(n for n, i in ids.items() if i == int(alg))
        return int(alg), name, 0, 0
    return (ids[alg], alg, 0, 0) if alg in ids else None


def _swept(table: TuningTable, collective: str, warn: list[str]) -> list | None:
    """[(comm bounds, rules)] from the library's own algorithms, where the sweep measured
    them (None where it did not)."""
    entries = swept_entries(table, LIBRARY, collective, warn)
    if entries is None:
        return None
    bounds = comm_bounds([e.nprocs for e in entries])
    fallback = (*OPEN_MPI_DECIDES, 0, 0)
    return [
        (
            b,
            swept_rules(
                e, lambda a: _swept_target(collective, a), fallback, warn, "Open MPI", collective
            ),
        )
        for b, e in zip(bounds, entries, strict=True)
    ]


def _rules(table: TuningTable, warn: list[str]) -> dict[str, list[tuple[CommBounds, list]]]:
    """collective -> [(comm bounds, rules)] for every collective Open MPI can take: its own
    algorithms as the sweep decided among them where it measured them, else the
    counterparts of the table's choices."""
    exported = {}
    for collective in COLLECTIVE_IDS:
        swept = _swept(table, collective, warn)
        if swept is not None:
            exported[collective] = swept
            continue
        entries = entries_per_comm_size(table, collective, warn)
        if not entries:
            continue
        bounds = comm_bounds([e.key.nprocs for e in entries])
        fallback = ((*OPEN_MPI_DECIDES, 0, 0), "Open MPI decides")
        exported[collective] = [
            (
                b,
                library_rules(
                    e, lambda c, coll=collective: _target(coll, c), fallback, warn, "Open MPI"
                ),
            )
            for b, e in zip(bounds, entries, strict=True)
        ]
    return exported


def _rule_line(rule: Rule) -> str:
    alg, _, fanout, segsize = rule.target
    return (
        f"{rule.min_bytes:<12} {alg} {fanout} {segsize}"
        f"   # {range_text(rule.min_bytes, rule.max_bytes)}: {rule.note}"
    )


def classic_text(table: TuningTable, warn: list[str], filename: str = "FILE") -> str:
    """The classic dynamic-rules file."""
    exported = _rules(table, warn)
    lines = [
        f"# Open MPI coll/tuned dynamic rules (classic format), written by osu-dl-bench "
        f"{__version__}",
        *(f"# {line}" for line in provenance_lines(table)),
        "# use: mpirun --mca coll_tuned_use_dynamic_rules 1 "
        f"--mca coll_tuned_dynamic_rules_filename {shell_word(filename)} ...",
        "# comm size N: applies from N up to the next listed size; a rule applies from its",
        "# message size up to the next; algorithm 0 lets Open MPI decide. Open MPI 6.0: use the",
        "# .openmpi.json file.",
        *(f"# not exported: {w}" for w in warn),
        f"{len(exported)}   # collectives",
    ]
    for collective, per_size in exported.items():
        lines.append(f"{COLLECTIVE_IDS[collective]}   # {collective}")
        lines.append(f"{len(per_size)}   # comm sizes")
        for bounds, rules in per_size:
            lines.append(f"{bounds.lo}   # comm size {_bounds_text(bounds)}")
            lines.append(f"{len(rules)}   # message sizes")
            lines += [_rule_line(r) for r in rules]
    return "\n".join(lines) + "\n"


def _bounds_text(bounds: CommBounds) -> str:
    upto = "and above" if bounds.hi is None else f"to {bounds.hi}"
    return f"{bounds.lo} {upto} (measured at p={bounds.nprocs})"


def _json_rule(rule: Rule) -> dict[str, Any]:
    _, name, fanout, segsize = rule.target
    out: dict[str, Any] = {"msg_size_min": rule.min_bytes}
    if rule.max_bytes is not None:
        out["msg_size_max"] = rule.max_bytes - 1  # inclusive in Open MPI
    out["alg"] = name
    if fanout:
        out["faninout"] = fanout
    if segsize:
        out["seg_size"] = segsize
    return out


def json_document(table: TuningTable, warn: list[str]) -> dict[str, Any]:
    """The Open MPI 6.0 JSON rules."""
    collectives = {}
    for collective, per_size in _rules(table, warn).items():
        collectives[collective] = [
            {
                "comm_size_min": bounds.lo,
                **({} if bounds.hi is None else {"comm_size_max": bounds.hi}),
                "rules": [_json_rule(r) for r in rules],
            }
            for bounds, rules in per_size
        ]
    return {"rule_file_version": 3, "module": "tuned", "collectives": collectives}


def export(table: TuningTable, base: Path) -> tuple[list[Path], list[str]]:
    """Write BASE.openmpi.rules and BASE.openmpi.json; returns the paths and warnings."""
    warn: list[str] = []
    rules_path, json_path = (beside(base, suffix) for suffix in SUFFIXES)
    write_text_atomic(rules_path, classic_text(table, warn, rules_path.name))
    write_text_atomic(json_path, json.dumps(json_document(table, []), indent=1) + "\n")
    return [rules_path, json_path], warn


def default_rules_text(collectives: tuple[str, ...] = tuple(COLLECTIVE_IDS)) -> str:
    """A classic rules file that states Open MPI's own decision everywhere: one rule from
    comm size 1 and message size 0 with algorithm 0. coll/tuned reads the file and, where a
    rule's algorithm is 0, goes on to the forced choice and then to its fixed decision
    (ompi/mca/coll/tuned/coll_tuned_decision_dynamic.c, e.g. ompi_coll_tuned_allreduce_
    intra_dec_dynamic), so the default runs through the same path as an export: the null
    control of verify-export."""
    lines = [
        "# Open MPI's own decision, loaded as a rules file (osu-dl-bench verify-export's null",
        "# control): algorithm 0 everywhere lets coll/tuned's fixed decision choose.",
        f"{len(collectives)}   # collectives",
    ]
    for collective in collectives:
        lines += [
            f"{COLLECTIVE_IDS[collective]}   # {collective}",
            "1   # comm sizes",
            "1   # comm size 1 and above",
            "1   # message sizes",
            "0 0 0 0   # from 0 bytes: Open MPI decides",
        ]
    return "\n".join(lines) + "\n"


def parse_classic(text: str) -> dict[int, list[tuple[int, list[tuple[int, int]]]]]:
    """A classic rules file: collective id -> [(comm size, [(message size, alg id)])],
    in file order ('#' starts a comment; the grammar of coll_tuned_dynamic_file.c)."""
    numbers = iter(int(tok) for line in text.splitlines() for tok in line.split("#")[0].split())
    rules: dict[int, list[tuple[int, list[tuple[int, int]]]]] = {}
    for _ in range(next(numbers)):
        coll_id, comm_sizes = next(numbers), next(numbers)
        blocks = []
        for _ in range(comm_sizes):
            comm_size, count = next(numbers), next(numbers)
            rows = []
            for _ in range(count):
                size, alg, _fanout, _segsize = (next(numbers) for _ in range(4))
                rows.append((size, alg))
            blocks.append((comm_size, rows))
        rules[coll_id] = blocks
    return rules


def rules_algorithm(text: str, collective: str, nprocs: int, size: int) -> str | None:
    """The coll/tuned algorithm (name) a classic rules file picks for ``collective`` of
    ``size`` bytes on ``nprocs`` ranks, None where it leaves the choice to Open MPI (id 0,
    or no rule): the last comm size <= nprocs, then the last message size <= size."""
    blocks = parse_classic(text).get(COLLECTIVE_IDS.get(collective, -1), [])
    block = [rows for comm_size, rows in blocks if comm_size <= nprocs]
    rows = [alg for start, alg in (block[-1] if block else []) if start <= size]
    alg = rows[-1] if rows else 0
    names = {i: n for n, i in ALGORITHM_IDS.get(collective, {}).items()}
    return names.get(alg) if alg else None
