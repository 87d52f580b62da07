"""Hostile input is refused with a usage error naming what was expected: algorithm
parameters (wherever a variant is named), table and platform files, bench options, and
the clean command's choice of stale shared-memory segments."""

import json
import mmap
import os
import time

import pytest
from support.files import fake_segment, platform_json, stale_names, write_file

from collectives import algorithms, all_algorithms, lookup
from collectives.registry import Algorithm, Split, parse_variant, parse_variants, whole_message
from osu_dl_bench import jsonfile
from osu_dl_bench.commands import clean
from osu_dl_bench.errors import UsageError
from osu_dl_bench.model.platform import PlatformError, load_platform
from osu_dl_bench.selection.selector import Selector
from osu_dl_bench.selection.table import TableError, load_table

# --- algorithm parameters -----------------------------------------------------------------


def test_a_size_parameter_given_a_word_names_the_parameter_and_an_example():
    with pytest.raises(UsageError) as info:
        parse_variant("allreduce", "ring:seg=abc")
    assert str(info.value) == "ring: seg expects a size such as 256K, got 'abc'"


@pytest.mark.parametrize(
    "collective,text",
    [
        ("allreduce", "cma:chunk=1"),
        ("allreduce", "cma:chunk=2G"),
        ("allreduce", "shm:chunk=3"),
        ("bcast", "shm:chunk=4095"),
        ("bcast", "chain:seg=1"),
        ("allreduce", "ring:seg=1"),
        ("allreduce", "ring:seg=99999999999999999999G"),
    ],
)
def test_chunk_and_segment_sizes_outside_4k_to_1g_are_refused(collective, text):
    with pytest.raises(UsageError, match=r"expects .*a size from 4K to 1G, got"):
        parse_variant(collective, text)


@pytest.mark.parametrize(
    "collective,text",
    [("allreduce", "cma:chunk=4K"), ("bcast", "chain:seg=1G"), ("allreduce", "ring:seg=0")],
)
def test_the_bounds_themselves_and_the_rings_whole_blocks_are_accepted(collective, text):
    assert parse_variant(collective, text).label == text


@pytest.mark.parametrize("value", ["512K", True, 1.5, -4096, None])
def test_a_table_value_of_the_wrong_kind_is_refused(value):
    with pytest.raises(UsageError, match="cma: chunk expects a whole number of bytes"):
        lookup("allreduce", "cma").variant(chunk=value)


@pytest.mark.parametrize("value", [5, "", None])
def test_an_inner_algorithm_must_be_a_name(value):
    with pytest.raises(UsageError, match="hierarchical: inner expects an algorithm name"):
        lookup("allreduce", "hierarchical").variant(inner=value)


def test_the_selector_forcing_checks_the_same_bounds():
    with pytest.raises(UsageError, match="cma: chunk expects .* from 4K to 1G, got 1"):
        Selector(force={"allreduce": "cma:chunk=1"})


def test_every_registered_default_and_grid_value_is_within_its_bounds():
    for algo in all_algorithms():
        for variant in [algo.variant(), *algo.grid_variants()]:
            # native's alg=auto is its plain label: the library's own choice, no parameter.
            shown = variant.params.keys() | ({"alg"} if algo.name == "native" else set())
            assert shown == algo.defaults.keys() | ({"alg"} if algo.name == "native" else set())
            algo.variant(**variant.params)  # within bounds: re-binding checks them again
    assert {a.name for a in algorithms("allreduce")} >= {"ring", "cma", "shm"}


def test_a_registration_whose_grid_breaks_its_bounds_fails_at_once():
    with pytest.raises(ValueError, match="chunk expects a size from 4K to 1G, got 1"):
        Algorithm(
            "bcast",
            "tiny",
            factory=lambda comm, chunk: None,
            defaults={"chunk": 4096},
            grid={"chunk": (1, 4096)},
            split=Split("chunk", whole_message),
        )


def _choice(name, params):
    return {"backend": "mpi", "algorithm": name, "params": params}


def _table():
    """A valid one-entry table: native below 64K, ring above."""
    ranges = [
        {"min_bytes": 0, "max_bytes": 65536, "choice": _choice("native", {})},
        {"min_bytes": 65536, "max_bytes": None, "choice": _choice("ring", {"seg": 4096})},
    ]
    entry = {"collective": "allreduce", "device": "cpu", "nodes": 1, "ppn": 2, "nprocs": 2}
    entry |= {"measured_bytes": [8, 1 << 20], "ranges": ranges}
    entry["points"] = [{"size_bytes": 8, "chosen": "native", "median_us": 1.0}]
    return {"schema_version": 1, "format": "osu-dl-bench tuning table", "entries": [entry]}


def _set(path, value):
    """A change to _table(): set the field at ``path`` (keys and indices) to ``value``."""

    def change(data):
        *parents, last = path
        for key in parents:
            data = data[key]
        data[last] = value

    return change


def _drop(path):
    """A change to a file's data: remove the field at ``path``."""

    def change(data):
        *parents, last = path
        for key in parents:
            data = data[key]
        del data[last]

    return change


ENTRY, RANGE1, POINT0 = ("entries", 0), ("entries", 0, "ranges", 1), ("entries", 0, "points", 0)
RANGE0 = (*ENTRY, "ranges", 0)


@pytest.mark.parametrize(
    "change,expected",
    [
        (_set((*RANGE1, "choice", "params", "seg"), 1), r"params: ring: seg expects 0 \(whole"),
        (_set((*RANGE1, "choice", "params", "seg"), "abc"), "seg expects a whole number of bytes"),
        (_set((*RANGE1, "min_bytes"), 10**40), "min_bytes: expected a whole number from 0 to"),
        (_set((*ENTRY, "nprocs"), 10**30), "nprocs: expected a whole number from 1 to"),
        (
            _set((*ENTRY, "measured_bytes"), [-5, 8]),
            r"measured_bytes\[0\]: expected a whole number.*, got -5",
        ),
        (_set((*ENTRY, "measured_bytes"), [9, 8]), r"measured_bytes: expected \[min, max\]"),
        (
            _set((*POINT0, "median_us"), -1),
            r"median_us: expected a number from 0 to 1e\+300, got -1",
        ),
        (_set((*POINT0, "speedup"), "x"), r"speedup: expected a number from 0 to 1e\+300, or null"),
        (_set((*POINT0, "native_median_us"), 2.0), "speedup: expected a number"),
        (_set((*POINT0, "reason"), ["x"]), "reason: expected a string, got a list"),
        (_set(("name",), 5), "name: expected a string, got 5"),
        (_set(("created",), None), "created: expected a string, got null"),
        (_set(("provenance",), [1]), "provenance: expected an object, got a list"),
        (_set(("provenance",), {"run": "x"}), "provenance.run: expected an object"),
        (_set(("measured_with",), "x"), "measured_with: expected an object"),
        (_set(("measured_with",), {"dtype": 5}), "measured_with.dtype: expected a string"),
        # A count written as a float is no count (JSON Schema's drafts 6+ would take 2.0).
        (_set((*ENTRY, "nodes"), 2.0), r"entries\[0\]\.nodes: expected a whole number .*, got 2.0"),
        (_drop(("schema_version",)), "schema_version: expected 1, got nothing"),
        (_drop((*RANGE1, "choice")), r"ranges\[1\]\.choice: expected a choice: .*, got nothing"),
        (_set((*ENTRY, "ranges"), []), "ranges: expected a non-empty list of ranges, got an empty"),
        (
            _set((*RANGE0, "max_bytes"), None),
            r"ranges\[0\]\.max_bytes: expected more than min_bytes 0 \(only the last range is",
        ),
        (_drop(("entries",)), "entries: expected a list of entries, got nothing"),
    ],
)
def test_table_fields_of_the_wrong_type_or_out_of_bounds_name_the_file(tmp_path, change, expected):
    data = _table()
    change(data)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TableError, match=expected) as info:
        load_table(path)
    assert str(info.value).startswith(f"tuning table {path}: ")


def _hostile_texts(valid: str) -> list:
    """(file text, expected message) pairs that break the JSON layer of a valid file."""
    deep = "[" * 100_000 + "]" * 100_000
    return [
        (valid.replace("1.0", "NaN", 1), "NaN is not a number"),
        (valid.replace("1.0", "-Infinity", 1), "-Infinity is not a number"),
        (valid.replace("1.0", "1e999", 1), "1e999 is not a finite number"),
        (valid.replace("{", '{"x": ' + deep + ", ", 1), "nested deeper than"),
        (valid.replace("1.0", "9" * 5000, 1), "more than 4300 digits"),
        (b"\xff\xfe{", "not UTF-8"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_table_json_that_python_cannot_hold_is_a_table_error(tmp_path, case):
    valid = json.dumps(_table())
    assert "1.0" in valid and load_table(write_file(tmp_path / "ok.json", valid)).entries
    content, expected = _hostile_texts(valid)[case]
    path = write_file(tmp_path / "t.json", content)
    with pytest.raises(TableError, match=expected) as info:
        load_table(path)
    assert str(info.value).startswith(f"tuning table {path}: (file): ")


def test_a_table_larger_than_the_limit_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonfile, "MAX_FILE_BYTES", 1000)
    path = write_file(tmp_path / "t.json", json.dumps(_table()) + " " * 1000)
    with pytest.raises(TableError, match="larger than 1000 bytes"):
        load_table(path)


INTRA = ("links", "intra")


PIECE0 = (*INTRA, "alpha_beta", 0)


@pytest.mark.parametrize(
    "change,expected",
    [
        (_set((*PIECE0, "alpha_s"), 10**400), r"alpha_s: expected a number from 0 to 1e\+300"),
        (_set((*PIECE0, "min_bytes"), 0.5), "min_bytes: expected a whole number from 0 to"),
        (_set((*PIECE0, "min_bytes"), True), "min_bytes: expected a whole number from 0 to"),
        (_set(("cores_per_node",), True), "cores_per_node: expected null or a whole number"),
        (_set(("cores_per_node",), 10**30), "cores_per_node: expected null or a whole number"),
        (_set((*INTRA, "measured"), "no"), "measured: expected true or false"),
        (_set((*INTRA, "note"), [1]), "note: expected a string, got a list"),
        (_set(("provenance",), [1, 2]), "provenance: expected an object or null, got a list"),
        (_set(("name",), {"a": 1}), "name: expected a string or null, got an object"),
        (_set(("assumed",), "yes"), "assumed: expected true or false"),
        (_set(("source",), 3), "source: expected a string, got 3"),
        (_set(("links", "wan"), {}), "links: expected an object with the link classes intra and"),
        (_drop(("links", "inter")), r"links\.inter: expected a link \(an object\), got nothing"),
        (_set(("software_overhead_s",), None), "software_overhead_s: expected a number from 0 to"),
        (
            _set((*INTRA, "gamma"), {}),
            r"links\.intra\.gamma: expected a non-empty list, got an obj",
        ),
    ],
)
def test_platform_fields_of_the_wrong_type_or_out_of_bounds_name_the_file(
    tmp_path, change, expected
):
    data = platform_json()
    change(data)
    path = write_file(tmp_path / "p.json", json.dumps(data))
    with pytest.raises(PlatformError, match=expected) as info:
        load_platform(path)
    assert str(info.value).startswith(f"platform {path}: ")


def test_a_fitted_platform_with_contention_states_passes_the_schema():
    from pathlib import Path

    fitted = Path(__file__).resolve().parents[2] / "results" / "model-platform-reference.json"
    platform = load_platform(fitted)
    assert len(platform.states) >= 2 and platform.intra.gamma_native


@pytest.mark.parametrize("case", range(6))
def test_platform_json_that_python_cannot_hold_is_a_platform_error(tmp_path, case):
    valid = json.dumps(platform_json()).replace("1e-06", "1.0", 1)
    content, expected = _hostile_texts(valid)[case]
    path = write_file(tmp_path / "p.json", content)
    with pytest.raises(PlatformError, match=expected) as info:
        load_platform(path)
    assert str(info.value).startswith(f"platform {path}: (file): ")


def test_a_segment_no_process_holds_is_stale_and_removed(tmp_path):
    path = fake_segment(tmp_path)
    assert stale_names(tmp_path) == [path.name]
    failures = clean.remove(clean.stale_segments(tmp_path, os.getuid(), min_age_s=60))
    assert failures == [] and not path.exists()


def test_both_kinds_of_mpich_segment_file_are_found_and_nothing_else(tmp_path):
    found = {fake_segment(tmp_path).name, fake_segment(tmp_path, "mpich_shar_tmpAb12Cd").name}
    fake_segment(tmp_path, "someone_elses_file")
    assert sorted(stale_names(tmp_path)) == sorted(found)


def test_a_segment_a_live_process_has_open_is_kept(tmp_path):
    path = fake_segment(tmp_path)
    with open(path, "rb"):
        assert stale_names(tmp_path) == []
    assert stale_names(tmp_path) == [path.name]


def test_a_segment_a_live_process_has_mapped_is_kept(tmp_path):
    path = fake_segment(tmp_path)
    with open(path, "r+b") as stream:
        mapping = mmap.mmap(stream.fileno(), 0)
    try:  # the file is closed: only /proc/PID/maps shows it
        assert stale_names(tmp_path) == []
    finally:
        mapping.close()
    assert stale_names(tmp_path) == [path.name]


def test_young_segments_and_other_files_are_kept(tmp_path):
    fake_segment(tmp_path, mtime=time.time())  # its job may be about to map it
    fake_segment(tmp_path, name="ucx_shm_posix_1234")
    fake_segment(tmp_path, name="mpich_notes")
    assert stale_names(tmp_path) == []


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a file to another user")
def test_another_users_segment_is_kept(tmp_path):
    os.chown(fake_segment(tmp_path), 4242, -1)
    assert stale_names(tmp_path) == []


def test_a_repeated_parameter_is_refused():
    with pytest.raises(UsageError, match="seg given twice"):
        parse_variant("allreduce", "ring:seg=4K,seg=8K")


def test_a_repeated_algorithm_is_measured_once():
    assert [v.label for v in parse_variants("allreduce", "ring,ring")] == ["ring:seg=256K"]


def test_a_platform_number_above_the_bound_names_the_bound(tmp_path):
    data = platform_json()
    data["links"]["intra"]["alpha_beta"][0]["alpha_s"] = 1e308
    path = write_file(tmp_path / "p.json", json.dumps(data))
    with pytest.raises(PlatformError, match=r"expected a number from 0 to 1e\+300, got 1e\+308"):
        load_platform(path)


def test_an_empty_platform_list_says_empty(tmp_path):
    data = platform_json()
    data["links"]["intra"]["alpha_beta"] = []
    path = write_file(tmp_path / "p.json", json.dumps(data))
    with pytest.raises(PlatformError, match="expected a non-empty list, got an empty list"):
        load_platform(path)


def test_a_segment_open_through_a_symlinked_directory_is_kept(tmp_path):
    real = tmp_path / "A"
    real.mkdir()
    path = fake_segment(real)
    (tmp_path / "B").symlink_to(real)
    with open(path, "rb"):
        assert stale_names(tmp_path / "B") == []


def test_a_segment_open_through_another_link_is_kept(tmp_path):
    path = fake_segment(tmp_path)
    other = tmp_path / "elsewhere"
    os.link(path, other)
    with open(other, "rb"):
        assert stale_names(tmp_path) == []
    import mmap

    with open(other, "r+b") as stream:
        mapping = mmap.mmap(stream.fileno(), 0)
    try:
        assert stale_names(tmp_path) == []
    finally:
        mapping.close()
    assert stale_names(tmp_path) == [path.name]
