"""The export to NCCL's tuner plugin (`tune --export nccl`): the CSV of NCCL's
ext-tuner/example, read here as its plugin.c reads it (a line of at most 255 bytes,
'#' comments, the first rule matching collective, size, nodes and ranks wins)."""

from __future__ import annotations

import pytest

from osu_dl_bench.selection.exports import parse_exports, write_exports
from osu_dl_bench.selection.exports.nccl import HEADER, NO_END
from osu_dl_bench.selection.table import Choice, Entry, EntryKey, SizeRange, TuningTable

MPI_RING = Choice("mpi", "ring")


def _nccl(**params: str) -> Choice:
    return Choice("nccl", "nccl", tuple(params.items()))


def _entry(collective, nprocs, spans, device="cuda", nodes=1):
    ends = [start for start, _ in spans[1:]] + [None]
    ranges = tuple(
        SizeRange(start, end, choice) for (start, choice), end in zip(spans, ends, strict=True)
    )
    return Entry(EntryKey(collective, device, nodes, nprocs // nodes, nprocs), ranges, (8, 1 << 26))


def _table(*entries, run_dir="runs/gpu"):
    header = {"schema_version": 1, "name": "g", "provenance": {"run_dir": run_dir}}
    return TuningTable(tuple(entries), header, "g.json")


def _export(table, tmp_path):
    [(library, paths, warnings)] = write_exports(table, tmp_path / "g", parse_exports("nccl"))
    assert library == "nccl" and [p.name for p in paths] == ["g.nccl_tuner.conf"]
    return paths[0].read_text(encoding="utf-8"), warnings  # a character cut in two fails


def _plugin_rules(text):
    """The rules as plugin.c loads them: 255 bytes a line at most (fgets into char[256]),
    '#' skipped."""
    rules = []
    for line in text.splitlines():
        assert len(line.encode("utf-8")) <= 255, line
        if not line or line.startswith("#"):
            continue
        fields = line.split(",")
        assert len(fields) == 10, line
        rules.append(
            (fields[0], *map(int, fields[1:3]), fields[3], fields[4], *map(int, fields[5:]))
        )
    return rules


def _plugin_choice(rules, colltype, nbytes, nodes, ranks):
    """(algorithm, protocol) of the first matching rule, None where NCCL decides."""
    for coll, lo, hi, algo, proto, _channels, r_nodes, r_ranks, _pipe, _reg in rules:
        shape_matches = r_nodes in (-1, nodes) and r_ranks in (-1, ranks)
        if coll == colltype and lo <= nbytes <= hi and shape_matches:
            return algo, proto
    return None


GPU_TABLE = (
    _entry(
        "allreduce",
        8,
        [
            (0, _nccl(algo="tree", proto="ll")),
            (65536, _nccl(algo="tree", proto="ll")),  # equal neighbours: one rule
            (1 << 20, MPI_RING),  # MPI won: no rule, NCCL decides
            (4 << 20, _nccl(algo="ring", proto="simple")),
        ],
    ),
    _entry("bcast", 8, [(0, _nccl()), (32768, _nccl(proto="ll128"))]),
    _entry("allreduce", 16, [(0, _nccl(algo="tree")), (8192, _nccl())], nodes=2),
    _entry("allreduce", 4, [(0, MPI_RING)], device="cpu"),
)


def test_each_forced_nccl_range_is_one_plugin_rule_at_its_measured_shape(tmp_path):
    text, warnings = _export(_table(*GPU_TABLE), tmp_path)
    rules = _plugin_rules(text)
    assert rules == [
        ("allreduce", 0, (1 << 20) - 1, "tree", "ll", -1, 1, 8, -1, -1),
        ("allreduce", 4 << 20, NO_END, "ring", "simple", -1, 1, 8, -1, -1),
        ("broadcast", 32768, NO_END, "ring", "ll128", -1, 1, 8, -1, -1),
    ]
    assert f"# {HEADER}" in text.splitlines()

    def at(coll, size, nodes=1, ranks=8):
        return _plugin_choice(rules, coll, size, nodes, ranks)

    assert at("allreduce", 65535) == at("allreduce", (1 << 20) - 1) == ("tree", "ll")
    assert at("allreduce", 1 << 20) is None  # the MPI range: NCCL's own choice
    assert at("allreduce", 1 << 40) == ("ring", "simple")
    assert at("allreduce", 8, ranks=4) is None  # other shapes: NCCL decides
    assert at("broadcast", 100) is None and at("broadcast", 32768) == ("ring", "ll128")
    # nccl:algo=tree forces no protocol, which the plugin cannot leave open: said, not written.
    [partial] = [w for w in warnings if "nccl:algo=tree forces only one" in w]
    assert "p=16" in partial and f"# not exported: {partial}"[:255] in text


def test_a_table_without_forced_nccl_choices_exports_comments_and_says_nccl_decides(tmp_path):
    text, warnings = _export(_table(GPU_TABLE[3], _entry("bcast", 2, [(0, _nccl())])), tmp_path)
    assert _plugin_rules(text) == []
    assert any("NCCL decides everywhere" in w for w in warnings)
    assert "NCCL decides everywhere" in text


@pytest.mark.parametrize(
    "run_dir", ["r" * 600, "r" + "é" * 300, "a\nallreduce,0,9,tree,ll,-1,-1,-1,-1,-1"]
)
def test_no_comment_of_the_export_can_become_a_rule(tmp_path, run_dir):
    # The plugin reads 255 bytes at a time (fgets): a longer comment would go on as a line of
    # its own, and a newline in provenance would start one.
    text, _ = _export(_table(GPU_TABLE[3], run_dir=run_dir), tmp_path)
    assert _plugin_rules(text) == []


def test_parse_exports_names_nccl_among_the_choices():
    with pytest.raises(Exception, match="openmpi, mpich, nccl"):
        parse_exports("nvidia")
