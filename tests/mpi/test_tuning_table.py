"""Building tuning tables from synthetic run directories, and validating table files."""

import copy
import json

import pytest
from support.tuning import (
    METADATA,
    model_points,
    table_json,
    write_run,
)

from osu_dl_bench.selection import SCHEMA_VERSION, TableError, build_table, load_table
from osu_dl_bench.selection.table import table_from_dict

pytestmark = pytest.mark.usefixtures("registered")


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
            assert p["tie_set"][0] == p["chosen"]
        # Every range that replaces native holds a size where its choice's interval lies
        # below 1 (q3 below native's median, these rows having no per-round times); its
        # other sizes only tie it with native (hysteresis).
        for r in entry.ranges:
            if not r.choice.is_native:
                inside = [p for p in entry.points if _within(p["size_bytes"], r)]
                assert any(p["ratio_high"] < 1 for p in inside), (entry.key, r)
    chosen = {p["chosen"] for e in table.entries for p in e.points}
    assert "native" in chosen and len(chosen) >= 3  # some sizes tuned, some not


def _within(size, size_range):
    return size >= size_range.min_bytes and (
        size_range.max_bytes is None or size < size_range.max_bytes
    )


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
        (dict, "schema_version", None, "schema_version", "expected 1, got nothing"),
        (dict, "entries", None, "entries", "expected a list of entries, got nothing"),
        (_entry0, "collective", "allgatherx", "entries[0].collective", "unknown collective"),
        (
            _entry0,
            "device",
            "tpu",
            "entries[0].device",
            "expected one of cpu, cpu-registered, cuda",
        ),
        (
            _entry0,
            "nprocs",
            "4",
            "entries[0].nprocs",
            'expected a whole number from 1 to 2147483647, got "4"',
        ),
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
            "expected a string, got nothing",
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
