"""Building tuning tables from synthetic run directories, and validating table files."""

import math
from dataclasses import replace

import numpy as np
import pytest
from support.tuning import (
    decision,
    label,
    launch_rows,
    launch_run,
    machine_states,
    model_points,
    point,
    scaled,
    write_run,
)

from collectives import algorithms
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import format_rounds
from osu_dl_bench.selection import TableError, build_table, load_table
from osu_dl_bench.selection.table import Choice
from osu_dl_bench.selection.tune import hysteresis, merge_ranges, point_record

pytestmark = pytest.mark.usefixtures("registered")


def _crafted(tmp_path):
    """Four sizes of legacy rows (no per-round times) where the interval (q1, q3) / native's
    median, the tie set and validation decide."""
    pts = [
        # 8 B: recursive_doubling's median is lower, but its q3 is above native's median.
        point("allreduce", "native", 8, 10.0, 2.0),
        point("allreduce", "recursive_doubling", 8, 9.5, 2.0),
        # 1 KiB: recursive_doubling beats the spread, but ring's median is lower still and
        # its wide spread reaches above native's median: native is tied with the best.
        point("allreduce", "native", 1024, 20.0, 2.0),
        point("allreduce", "recursive_doubling", 1024, 17.0, 2.0),
        point("allreduce", "ring", 1024, 16.5, 8.0),
        # 64 KiB: two below native, apart from each other: the lower ratio is chosen.
        point("allreduce", "native", 65536, 100.0, 4.0),
        point("allreduce", "ring", 65536, 60.0, 4.0),
        point("allreduce", "rabenseifner", 65536, 70.0, 4.0),
        # 1 MiB: the fastest failed validation and must never be chosen.
        point("allreduce", "native", 1 << 20, 900.0, 10.0),
        point("allreduce", "ring", 1 << 20, 500.0, 10.0),
        point("allreduce", "rabenseifner", 1 << 20, 300.0, 10.0, validation="fail"),
    ]
    return write_run(tmp_path / "run", pts)


def test_legacy_rows_decide_by_their_quartiles_ties_and_validation(tmp_path):
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
    ring = label("allreduce", "ring")
    rd = label("allreduce", "recursive_doubling")
    # 8 B: 0.95 [0.85-1.05] gains 5% beyond the 2% zone at a 2.5% chance of 5% slower;
    # 1 KiB: ring's lower expected time beats recursive_doubling's by more than the zone;
    # 1 MiB: the fastest failed validation, so ring; 64 KiB and 1 MiB merged.
    assert spans == [(0, 1024, rd), (1024, None, ring)]
    by_size = {p["size_bytes"]: p for p in entry.points}
    assert by_size[8]["fastest"] == rd and by_size[8]["tie_set"] == [rd]
    assert by_size[8]["chance_slower"] == pytest.approx(0.025, abs=0.001)
    assert by_size[1024]["tie_set"] == [ring]
    assert by_size[65536]["speedup"] == pytest.approx(100 / 60, rel=1e-3)
    assert (by_size[65536]["ratio_low"], by_size[65536]["ratio_high"]) == (0.58, 0.62)
    assert by_size[65536]["tie_set"] == [ring]
    assert entry.measured_bytes == (8, 1 << 20)


def test_legacy_rows_read_their_quartiles_as_the_interval(tmp_path):
    """Rows without per-round times: ratio = median / native's median, interval = (q1, q3)
    / native's median, decided by the rule like any other."""
    pts = [
        point("allreduce", "native", 8, 10.0, 2.0),
        point("allreduce", "rabenseifner", 8, 9.9, 2.0),  # 1% faster: within the zone
        point("allreduce", "native", 4096, 30.0, 2.0),
        point("allreduce", "recursive_doubling", 4096, 25.0, 2.0),
        point("allreduce", "rabenseifner", 4096, 29.0, 2.0),
    ]
    (entry,) = build_table(write_run(tmp_path / "run", pts), "old")[0].entries
    assert [p["chosen"] for p in entry.points] == ["native", "recursive_doubling"]
    assert entry.points[0]["tie_set"] == ["native", "rabenseifner"]
    assert entry.points[1]["ratio_high"] == pytest.approx(26 / 30, abs=1e-4)


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


# --- multi-launch sweeps: paired ratios, tie sets, hysteresis -----------------------------


def _multi_launch(tmp_path, candidates, size=4096):
    """A run of one size: clean native and each candidate {name: factor or per-launch
    factors} paired with it in the mpi group."""
    return launch_run(tmp_path / "run", {size: candidates})


def test_a_candidate_ten_percent_faster_in_every_round_replaces_native(tmp_path):
    run = _multi_launch(tmp_path, {"recursive_doubling": 0.9, "rabenseifner": 1.2})
    (entry,) = build_table(run, "t")[0].entries
    (only,) = entry.points
    assert only["chosen"] == "recursive_doubling" and only["tie_set"] == ["recursive_doubling"]
    assert only["ratio"] == pytest.approx(0.9, rel=0.01)
    assert only["ratio_low"] <= only["ratio"] <= only["ratio_high"] < 1
    assert only["speedup"] == pytest.approx(1 / only["ratio"], rel=1e-3)
    assert (only["launches"], only["rounds"]) == (3, 60)
    assert "P(>5% slower) 0.000" in only["reason"]


def test_faster_in_one_launch_and_slower_in_two_keeps_native(tmp_path):
    run = _multi_launch(tmp_path, {"recursive_doubling": [0.7, 1.05, 1.05]})
    (entry,) = build_table(run, "t")[0].entries
    (only,) = entry.points
    assert only["chosen"] == "native" and only["ratio"] == 1.0
    assert "native" in only["tie_set"]


def test_the_same_run_gives_the_same_table(tmp_path):
    run = _multi_launch(tmp_path, {"recursive_doubling": [0.9, 1.0, 0.95], "ring": 0.97})
    first, second = (build_table(run, "t")[0].entries for _ in range(2))
    assert first == second


def test_the_rule_takes_the_lowest_expected_time_and_native_only_within_the_zone():
    ring, ring_1m = label("allreduce", "ring"), label("allreduce", "ring:seg=1M")
    # Within the 2% zone of native: tied, and native is chosen.
    tied = decision(8, {"recursive_doubling": (0.985, 0.95, 1.02)})
    assert tied.tie_set == ("native", "recursive_doubling") and tied.chosen == "native"
    # An expected gain of 10% within the risk replaces native, though the interval reaches 1
    # (the old rule kept native there).
    gain = decision(8, {"recursive_doubling": (0.9, 0.8, 1.01)})
    assert gain.tie_set == ("recursive_doubling",) and gain.chosen == "recursive_doubling"
    # Below 1: the lowest expected time, not the simplest variant (the old rule's pick was
    # recursive_doubling, 7% slower than ring:seg=1M).
    below = decision(
        8,
        {
            "recursive_doubling": (0.75, 0.7, 0.8),
            ring: (0.72, 0.68, 0.76),
            ring_1m: (0.7, 0.66, 0.74),
            "rabenseifner": (0.9, 0.85, 0.95),
        },
    )
    assert below.best == ring_1m and below.chosen == ring_1m and below.tie_set == (ring_1m,)
    # Within the zone of each other: both tied, the lower expected time first.
    close = decision(
        8, {"rabenseifner": (0.74, 0.7, 0.78), "recursive_doubling": (0.75, 0.71, 0.79)}
    )
    assert close.tie_set == ("rabenseifner", "recursive_doubling")
    # Too risky: a 22% chance of being more than 5% slower; native stays.
    risky = decision(8, {"recursive_doubling": (0.8, 0.4, 1.6)})
    assert risky.chosen == "native" and risky.tie_set == ("native",)
    assert "native kept" in point_record(risky)["reason"]


def test_a_candidate_beyond_the_zone_of_the_best_is_not_tied():
    point = decision(8, {"recursive_doubling": (0.8, 0.7, 0.99), "ring": (0.9, 0.75, 1.1)})
    assert point.tie_set == ("recursive_doubling",)
    # Both cannot be told from the best beyond the zone: compare's all-candidate set.
    assert set(point.equivalent) == {"recursive_doubling", label("allreduce", "ring")}


def test_hysteresis_merges_sizes_whose_tie_sets_intersect_and_not_disjoint_ones():
    points = [
        decision(8, {"recursive_doubling": (0.70, 0.65, 0.75), "rabenseifner": (0.71, 0.66, 0.76)}),
        decision(16, {"rabenseifner": (0.70, 0.66, 0.74), "ring": (0.71, 0.66, 0.75)}),
        decision(32, {"reduce_bcast": (0.5, 0.45, 0.55), "rabenseifner": (0.8, 0.75, 0.85)}),
    ]
    assert [p.chosen for p in points] == ["recursive_doubling", "rabenseifner", "reduce_bcast"]
    merged = hysteresis(points)
    # 8 and 16 share rabenseifner within the zone; 32's tie set shares nothing with theirs.
    assert [p.chosen for p in merged] == ["rabenseifner", "rabenseifner", "reduce_bcast"]
    assert merged[0].tie_set == ("rabenseifner", "recursive_doubling")
    ranges = merge_ranges([(p.size, p.candidates[p.chosen].choice) for p in merged])
    assert [(r.min_bytes, r.choice.label) for r in ranges] == [
        (0, "rabenseifner"),
        (32, "reduce_bcast"),
    ]


def test_hysteresis_carries_a_candidate_only_into_sizes_where_it_is_eligible_and_tied():
    points = [
        decision(8, {"recursive_doubling": (0.99, 0.95, 1.03)}),  # within native's zone
        decision(16, {"recursive_doubling": (0.7, 0.65, 0.75)}),  # faster beyond the zone
        decision(32, {"recursive_doubling": (0.72, 0.66, 0.78), "ring": (0.715, 0.7, 0.73)}),
        decision(64, {"recursive_doubling": (1.0, 0.85, 1.2)}),  # 29% chance 5% slower: not
    ]
    assert points[0].tie_set == ("native", "recursive_doubling") and points[0].chosen == "native"
    assert points[2].chosen == label("allreduce", "ring") and points[3].tie_set == ("native",)
    merged = hysteresis(points)
    assert [p.chosen for p in merged] == [
        "recursive_doubling",
        "recursive_doubling",
        "recursive_doubling",
        "native",
    ]


def test_a_range_choice_is_its_lowest_mean_expected_time_over_its_sizes():
    points = [
        decision(8, {"recursive_doubling": (0.70, 0.6, 0.8), "rabenseifner": (0.71, 0.6, 0.8)}),
        decision(16, {"recursive_doubling": (0.72, 0.6, 0.8), "rabenseifner": (0.706, 0.6, 0.8)}),
    ]
    assert [p.chosen for p in points] == ["recursive_doubling", "rabenseifner"]
    assert [p.chosen for p in hysteresis(points)] == ["rabenseifner", "rabenseifner"]


@pytest.mark.skipif(
    not any(a.name == "gloo" for a in algorithms("allreduce")), reason="gloo backend not here"
)
def test_gloo_pairs_launch_by_launch_with_clean_native(tmp_path):
    """Native also ran in gloo's launches, 3x slower beside gloo's threads: the ratio is
    against the mpi group's native, launch k with launch k."""
    states = machine_states(launches=3, rounds=20)
    rows = launch_rows("allreduce", "native", 4096, states, group="mpi")
    gloo_states = machine_states(launches=3, rounds=20, seed=9)  # other rounds, same launches
    rows += launch_rows("allreduce", "native", 4096, scaled(gloo_states, 3.0), group="gloo")
    # 0.8: the launches' medians move by +-6% (their own rounds): 0.9 would be a tie
    rows += launch_rows("allreduce", "gloo", 4096, scaled(gloo_states, 0.8, seed=4), group="gloo")
    (entry,) = build_table(write_run(tmp_path / "run", rows), "g")[0].entries
    (only,) = entry.points
    assert only["chosen"] == "gloo" and only["backend"] == "gloo"
    assert only["ratio"] == pytest.approx(0.8, rel=0.07) and only["ratio_high"] < 1
    assert only["launches"] == 3
    assert only["native_median_us"] == pytest.approx(np.median(np.concatenate(states)), rel=1e-3)


def test_a_row_measured_in_an_outlying_state_is_superseded_by_its_remeasurement(tmp_path):
    states = machine_states(launches=3, rounds=20)
    rows = launch_rows("allreduce", "native", 4096, states)
    fast = launch_rows("allreduce", "recursive_doubling", 4096, scaled(states, 0.9))
    outlying = replace(fast[1], round_us=format_rounds(states[1] * 5), state="outlying")
    rows += [fast[0], outlying, replace(fast[1], state="remeasured"), fast[2]]
    (entry,) = build_table(write_run(tmp_path / "run", rows), "o")[0].entries
    assert entry.points[0]["ratio"] == pytest.approx(0.9, rel=0.01)
    assert entry.points[0]["ratio_high"] < 1


def test_a_candidate_that_failed_validation_in_one_launch_is_never_chosen(tmp_path):
    states = machine_states(launches=3, rounds=20)
    rows = launch_rows("allreduce", "native", 4096, states)
    fast = launch_rows("allreduce", "recursive_doubling", 4096, scaled(states, 0.5))
    rows += [fast[0], replace(fast[1], validation="fail"), fast[2]]
    (entry,) = build_table(write_run(tmp_path / "run", rows), "v")[0].entries
    assert entry.points[0]["chosen"] == "native" and entry.points[0]["candidates"] == 1


def test_a_table_with_a_non_finite_number_is_not_written(tmp_path):
    table, _ = build_table(write_run(tmp_path / "run", model_points(nprocs_list=(2,))))
    table.entries[0].points[0]["median_us"] = math.inf
    with pytest.raises(TableError, match="not a finite number"):
        table.write(tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()
