"""Building tuning tables from synthetic run directories, and validating table files."""

import copy
import json

import pytest
from test_tuning_support import (  # noqa: F401  (registered is a fixture)
    METADATA,
    label,
    model_points,
    point,
    registered,
    table_json,
    write_run,
)

from collectives import algorithms
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection import SCHEMA_VERSION, TableError, build_table, load_table
from osu_dl_bench.selection.table import Choice, table_from_dict
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


def test_model_run_table_is_contiguous_merged_and_noise_aware(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2, 3, 4)))
    table, _ = build_table(run, "model")
    assert {(e.key.collective, e.key.nprocs) for e in table.entries} == {
        (c, p) for c in ("allreduce", "bcast") for p in (2, 3, 4)
    }
    for entry in table.entries:
        assert entry.ranges[0].min_bytes == 0 and entry.ranges[-1].max_bytes is None
        for before, after in zip(entry.ranges, entry.ranges[1:], strict=False):
            assert before.max_bytes == after.min_bytes
            assert before.choice != after.choice
        for p in entry.points:
            if p["chosen"] != "native":
                assert p["q3_us"] < _native_median(run, entry.key, p["size_bytes"])
    chosen = {p["chosen"] for e in table.entries for p in e.points}
    assert "native" in chosen and len(chosen) >= 3  # some sizes tuned, some not


def _native_median(run, key, size):
    import pandas as pd

    frame = pd.read_csv(run / "results.csv")
    row = frame[
        (frame.collective == key.collective)
        & (frame.nprocs == key.nprocs)
        & (frame.size_bytes == size)
        & (frame.algorithm == "native")
    ]
    return float(row.median_us.iloc[0])


def test_table_file_round_trips_and_carries_provenance(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,)))
    table, _ = build_table(run, "rt")
    path = table.write(tmp_path / "tables" / "rt.json")
    data = table_json(path)
    assert data["schema_version"] == SCHEMA_VERSION == 1
    prov = data["provenance"]
    assert prov["run_dir"] == str(run.resolve())
    assert prov["run"]["mpi_library"].startswith("MPICH")
    assert prov["run"]["hosts"] == ["refhost"] and prov["run"]["date"] == METADATA["date"]
    assert prov["run"]["package_version"] == "0.1.0" and "sweep" in prov["run"]["command"]
    assert prov["run_metadata"]["jobs"] and prov["tuned_by"]["host"]
    assert data["measured_with"] == {"dtype": "float32", "op": "sum"}
    assert "q3" in data["noise_rule"]
    loaded = load_table(path)
    assert [e.key for e in loaded.entries] == [e.key for e in table.entries]
    assert [e.ranges for e in loaded.entries] == [e.ranges for e in table.entries]


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


# --- validation of table files ----------------------------------------------------------


@pytest.fixture
def good(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2, 4)))
    table, _ = build_table(run, "good")
    return table.as_dict()


def _entry0(data):
    return data["entries"][0]


def _range(i):
    return lambda data: _entry0(data)["ranges"][i]


def _choice(i):
    return lambda data: _range(i)(data)["choice"]


@pytest.mark.parametrize(
    "where,key,value,field,message",
    [
        (dict, "schema_version", 2, "schema_version", "expected 1, got 2"),
        (dict, "schema_version", None, "schema_version", "expected 1, got missing"),
        (dict, "entries", None, "entries", "missing"),
        (_entry0, "collective", "allgatherx", "entries[0].collective", "unknown collective"),
        (
            _entry0,
            "device",
            "tpu",
            "entries[0].device",
            "expected one of cpu, cpu-registered, cuda",
        ),
        (_entry0, "nprocs", "4", "entries[0].nprocs", 'expected int, got "4"'),
        (_entry0, "nodes", 0, "entries[0].nodes", "expected a whole number from 1 to"),
        (
            _choice(1),
            "algorithm",
            "nosuch",
            "entries[0].ranges[1].choice.algorithm",
            "unknown algorithm 'nosuch' for allreduce",
        ),
        (
            _choice(0),
            "params",
            {"bogus": 3},
            "entries[0].ranges[0].choice.params",
            "has no parameter bogus",
        ),
        (_choice(0), "backend", "nccl", "entries[0].ranges[0].choice.backend", "not 'nccl'"),
        (_range(0), "min_bytes", 8, "entries[0].ranges[0].min_bytes", "must start at 0"),
        (_entry0, "measured_bytes", [8], "entries[0].measured_bytes", "expected [min, max]"),
        (
            lambda d: _entry0(d)["points"][0],
            "chosen",
            None,
            "entries[0].points[0].chosen",
            "missing",
        ),
        (_range(-1), "max_bytes", 1 << 40, "entries[0].ranges[LAST].max_bytes", "must be open"),
    ],
)
def test_bad_tables_name_the_file_and_the_field(tmp_path, good, where, key, value, field, message):
    data = copy.deepcopy(good)
    ranges = _entry0(data)["ranges"]
    assert len(ranges) >= 3  # the cases above change ranges 0, 1 and the last
    field = field.replace("LAST", str(len(ranges) - 1))
    target = data if where is dict else where(data)
    if value is None:
        del target[key]
    else:
        target[key] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TableError) as err:
        load_table(path)
    assert str(path) in str(err.value) and f": {field}: " in str(err.value)
    assert message in str(err.value)


def test_overlapping_and_gapped_ranges_and_duplicate_entries_are_refused(good):
    overlap = copy.deepcopy(good)
    overlap["entries"][0]["ranges"][1]["min_bytes"] -= 1
    with pytest.raises(TableError, match=r"entries\[0\]\.ranges\[1\]\.min_bytes: overlapping"):
        table_from_dict(overlap, "t.json")
    gap = copy.deepcopy(good)
    gap["entries"][0]["ranges"][1]["min_bytes"] += 1
    with pytest.raises(TableError, match=r"ranges\[1\]\.min_bytes: gap after the previous"):
        table_from_dict(gap, "t.json")
    twice = copy.deepcopy(good)
    twice["entries"].append(copy.deepcopy(twice["entries"][0]))
    with pytest.raises(TableError, match=r"entries\[\d+\]: same key as entries\[0\]"):
        table_from_dict(twice, "t.json")


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
