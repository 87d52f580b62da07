"""Building tuning tables from synthetic run directories, and validating table files."""

import pytest
from support.tuning import (
    label,
    point,
    write_run,
)

from collectives import algorithms
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection import TableError, build_table, load_table
from osu_dl_bench.selection.table import Choice
from osu_dl_bench.selection.tune import Measured, beats_native, decide, merge_ranges

pytestmark = pytest.mark.usefixtures("registered")


def _crafted(tmp_path):
    """Four sizes where the noise rule, the best median and validation decide."""
    pts = [
        # 8 B: recursive_doubling's median is lower, but its q3 is above native's median.
        point("allreduce", "native", 8, 10.0, 2.0),
        point("allreduce", "recursive_doubling", 8, 9.5, 2.0),
        # 1 KiB: recursive_doubling beats the spread; ring's median is lower still, but its
        # wide spread reaches above native's median.
        point("allreduce", "native", 1024, 20.0, 2.0),
        point("allreduce", "recursive_doubling", 1024, 17.0, 2.0),
        point("allreduce", "ring", 1024, 16.5, 8.0),
        # 64 KiB: two winners, the lower median is chosen.
        point("allreduce", "native", 65536, 100.0, 4.0),
        point("allreduce", "ring", 65536, 60.0, 4.0),
        point("allreduce", "rabenseifner", 65536, 70.0, 4.0),
        # 1 MiB: the fastest failed validation and must never be chosen.
        point("allreduce", "native", 1 << 20, 900.0, 10.0),
        point("allreduce", "ring", 1 << 20, 500.0, 10.0),
        point("allreduce", "rabenseifner", 1 << 20, 300.0, 10.0, validation="fail"),
    ]
    return write_run(tmp_path / "run", pts)


def test_noise_rule_validation_and_merging(tmp_path):
    table, warnings = build_table(_crafted(tmp_path), "crafted")
    assert warnings == []
    (entry,) = table.entries
    assert (entry.key.collective, entry.key.nprocs, entry.key.nodes, entry.key.ppn) == (
        "allreduce",
        4,
        1,
        4,
    )
    spans = [(r.min_bytes, r.max_bytes, r.choice.label) for r in entry.ranges]
    assert spans == [
        (0, 1024, "native"),
        (1024, 65536, label("allreduce", "recursive_doubling")),
        (65536, None, label("allreduce", "ring")),  # 64 KiB and 1 MiB merged
    ]
    by_size = {p["size_bytes"]: p for p in entry.points}
    assert by_size[8]["fastest"] == label("allreduce", "recursive_doubling")
    assert by_size[8]["chosen"] == "native" and by_size[8]["speedup"] == 1.0
    assert by_size[65536]["speedup"] == pytest.approx(100 / 60, rel=1e-3)
    assert entry.measured_bytes == (8, 1 << 20)


def test_beats_native_is_strict_and_decide_prefers_lowest_median_among_winners():
    native = Measured(Choice("mpi", "native"), 10.0, 9.0, 11.0)
    touching = Measured(Choice("mpi", "ring"), 8.0, 7.0, 10.0)
    assert not beats_native(touching, native)  # q3 == native median: within the noise
    fast_wide = Measured(Choice("mpi", "ring"), 5.0, 1.0, 10.5)
    slower_tight = Measured(Choice("mpi", "rabenseifner"), 7.0, 6.5, 7.5)
    chosen, reason = decide([native, fast_wide, slower_tight])
    assert chosen is slower_tight and "q3 7.50 < native median 10.00" in reason
    alone, why = decide([fast_wide, slower_tight])
    assert alone is fast_wide and "no native" in why


def test_merge_ranges_covers_sizes_from_zero_and_ends_open():
    a, b = Choice("mpi", "native"), Choice("mpi", "ring")
    ranges = merge_ranges([(8, a), (16, a), (32, b), (64, b), (128, a)])
    assert [(r.min_bytes, r.max_bytes, r.choice) for r in ranges] == [
        (0, 32, a),
        (32, 128, b),
        (128, None, a),
    ]
    (only,) = merge_ranges([(4, b)])
    assert (only.min_bytes, only.max_bytes) == (0, None)


def test_unregistered_algorithms_and_other_dtypes_are_left_out(tmp_path):
    pts = [point("allreduce", "native", 8, 5.0, 0.5), point("allreduce", "native", 64, 6.0, 0.5)]
    ghost = point("allreduce", "native", 8, 1.0, 0.1)
    ghost = type(ghost)(**{**ghost.__dict__, "algorithm": "nosuch", "backend": "mpi"})
    wide = type(ghost)(**{**pts[0].__dict__, "dtype": "float64", "median_us": 0.5})
    table, warnings = build_table(write_run(tmp_path / "run", [*pts, ghost, wide]), "x")
    assert any("'nosuch' left out" in w for w in warnings)
    (entry,) = table.entries
    assert [p["chosen"] for p in entry.points] == ["native", "native"]


@pytest.mark.skipif(
    not any(a.name == "gloo" for a in algorithms("allreduce")), reason="gloo backend not here"
)
def test_gloo_competes_as_a_backend(tmp_path):
    pts = [
        point("allreduce", "native", 4096, 50.0, 2.0),
        point("allreduce", "gloo", 4096, 30.0, 2.0),
    ]
    table, _ = build_table(write_run(tmp_path / "run", pts), "g")
    choice = table.entries[0].ranges[0].choice
    assert (choice.backend, choice.algorithm) == ("gloo", "gloo")


def test_tune_refuses_a_directory_without_results(tmp_path):
    with pytest.raises(UsageError, match="not a sweep run directory"):
        build_table(tmp_path, "x")


def test_not_json_and_missing_files_are_reported(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1, "entries": [')
    with pytest.raises(TableError, match=r"broken\.json: \(file\): not JSON: .* line 1"):
        load_table(broken)
    with pytest.raises(TableError, match=r"nothere\.json: \(file\): cannot read"):
        load_table(tmp_path / "nothere.json")


def test_twins_count_as_one_candidate(tmp_path):
    """Chunk sizes at or above the message run the same code: the tuner keeps the largest
    chunk's name for them, and a luckier draw of a twin is never the choice."""
    at_64k = [
        point("allreduce", "native", 65536, 100.0, 4.0),
        point("allreduce", "ring:seg=0", 65536, 70.0, 4.0),
        point("allreduce", "ring:seg=1M", 65536, 61.0, 4.0),  # twin of seg=0: 16K blocks
        point("allreduce", "ring:seg=4K", 65536, 65.0, 4.0),  # 4 segments per block: distinct
    ]
    at_16m = [
        point("allreduce", "native", 16 << 20, 900.0, 10.0),
        point("allreduce", "ring:seg=0", 16 << 20, 600.0, 10.0),
        point("allreduce", "ring:seg=1M", 16 << 20, 500.0, 10.0),  # 4 MiB blocks: distinct
    ]
    table, _ = build_table(write_run(tmp_path / "run", at_64k + at_16m), "twins")
    (entry,) = table.entries
    by_size = {p["size_bytes"]: p for p in entry.points}
    # seg=1M's 61 us is seg=0's code at 64 KiB: seg=4K (65 us) is the best distinct one.
    assert by_size[65536]["chosen"] == "ring:seg=4K"
    assert by_size[65536]["candidates"] == 3
    assert by_size[16 << 20]["chosen"] == "ring:seg=1M" and by_size[16 << 20]["candidates"] == 3


@pytest.mark.parametrize(
    "name, grid, p, count, kept",
    [
        # shm cuts the whole message: at 256K floats (1 MiB) chunks >= 1M are one pass.
        ("shm", "chunk", 2, 256 << 10, ["256K", "16M"]),
        # ring cuts each of the p blocks: 1 MiB over 4 ranks is 256 KiB blocks.
        ("ring", "seg", 4, 256 << 10, ["0"]),
        ("ring", "seg", 2, 256 << 10, ["0", "256K"]),
        # every segment size cuts 16 MiB: nothing is a twin.
        ("chain", "seg", 2, 4 << 20, ["64K", "256K", "1M"]),
    ],
)
def test_distinct_variants_keep_the_largest_of_twins(name, grid, p, count, kept):
    from collectives import distinct_variants, lookup
    from collectives.units import format_size

    collective = "bcast" if name == "chain" else "allreduce"
    algorithm = lookup(collective, name)
    variants = algorithm.grid_variants()
    got = distinct_variants(variants, p, count, 4)
    assert [format_size(v.params[grid]) for v in got] == kept


def test_a_piece_under_one_element_is_one_element_except_for_the_ring():
    from collectives import Variant, distinct_variants, lookup
    from osu_dl_bench.errors import UsageError

    # Pieces this small are refused by the parameters' bounds (4K..1G); the variants are
    # built directly to check the twin rule on its own.
    # chain cuts at least one element per segment: seg=2 on float64 is 1-element segments,
    # not the whole message, so it is no twin of seg=1M at 64 elements.
    chain = lookup("bcast", "chain")
    tiny, large = Variant(chain, {"seg": 2}), chain.variant(seg=1 << 20)
    assert len(distinct_variants([tiny, large], 2, 64, 8)) == 2
    # The ring's seg below one element means whole blocks: a twin of seg=0.
    ring = lookup("allreduce", "ring")
    kept = distinct_variants([Variant(ring, {"seg": 2}), ring.variant(seg=0)], 2, 64, 8)
    assert [v.params["seg"] for v in kept] == [0]
    with pytest.raises(UsageError, match="chain: seg expects a size from 4K to 1G, got 0"):
        chain.variant(seg=0)


def test_the_shipped_tables_pass_the_table_schema_which_is_a_valid_schema():
    from pathlib import Path

    from osu_dl_bench.selection.schema_check import load_schema
    from osu_dl_bench.selection.table import SCHEMA

    assert load_schema(*SCHEMA).schema["properties"]["schema_version"]["const"] == 1
    repo = Path(__file__).resolve().parents[2]
    tables = [repo / "tuning_tables" / "reference-cpu-mpich-1node.json"]
    tables.append(repo / "results" / "predicted-1024x8.json")  # the model's predicted table
    for path in tables:
        assert load_table(path).entries
