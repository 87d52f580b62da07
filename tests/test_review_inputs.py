"""Inputs a hostile review found mishandled: infinite statistics in a run, segments held
through a second path, FIFOs given as JSON files, and option values that slipped past."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import pytest
from test_input_bounds import _platform, _segment, _stale, _write
from test_tuning_support import model_points, write_run

from collectives.registry import parse_variant, parse_variants
from osu_dl_bench import jsonfile
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.options import check_script_values
from osu_dl_bench.measurement.options import add_bench_arguments, config_from_args, parse_root
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.model.platform import PlatformError, load_platform
from osu_dl_bench.selection import build_table
from osu_dl_bench.selection.table import TableError, load_table

CLI = [sys.executable, "-m", "osu_dl_bench.cli"]


def _cli(*args, timeout=60):
    code = "import sys\nfrom osu_dl_bench.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# --- 1. infinite statistics ---------------------------------------------------------------


def _infinite_native(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,), collectives=("allreduce",)))
    results = RunStore(run).results_path
    lines = results.read_text().splitlines()
    header = lines[0].split(",")
    stats = [header.index(n) for n in ("median_us", "q1_us", "q3_us", "spread_us")]
    out = [lines[0]]
    for line in lines[1:]:
        fields = line.split(",")
        if fields[header.index("algorithm")] == "native":
            for i in stats:
                fields[i] = "1e999"
        out.append(",".join(fields))
    results.write_text("\n".join(out) + "\n")
    return run


def test_rows_with_infinite_statistics_are_dropped_and_counted(tmp_path):
    run = _infinite_native(tmp_path)
    frame, notes = RunStore(run).read()
    assert not frame.empty and "native" not in set(frame["algorithm"])
    assert len(notes) == 1 and "median_us 'inf' is not a finite number" in notes[0]
    table, warnings = build_table(run)
    for point in (p for e in table.entries for p in e.points):
        assert all(math.isfinite(v) for v in point.values() if isinstance(v, float)), point


def test_a_table_with_a_non_finite_number_is_not_written(tmp_path):
    table, _ = build_table(write_run(tmp_path / "run", model_points(nprocs_list=(2,))))
    table.entries[0].points[0]["median_us"] = math.inf
    with pytest.raises(TableError, match="not a finite number"):
        table.write(tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


# --- 2. clean compares files, not path strings --------------------------------------------


def test_a_segment_open_through_a_symlinked_directory_is_kept(tmp_path):
    real = tmp_path / "A"
    real.mkdir()
    path = _segment(real)
    (tmp_path / "B").symlink_to(real)
    with open(path, "rb"):
        assert _stale(tmp_path / "B") == []


def test_a_segment_open_through_another_link_is_kept(tmp_path):
    path = _segment(tmp_path)
    other = tmp_path / "elsewhere"
    os.link(path, other)
    with open(other, "rb"):
        assert _stale(tmp_path) == []
    import mmap

    with open(other, "r+b") as stream:
        mapping = mmap.mmap(stream.fileno(), 0)
    try:
        assert _stale(tmp_path) == []
    finally:
        mapping.close()
    assert _stale(tmp_path) == [path.name]


# --- 3. FIFOs as JSON files ---------------------------------------------------------------


def test_a_fifo_is_not_read_as_a_table_or_platform(tmp_path):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    with pytest.raises(jsonfile.UnreadableJson, match="not a regular file"):
        jsonfile.load_json(fifo)
    with pytest.raises(TableError, match="not a regular file"):
        load_table(fifo)
    with pytest.raises(PlatformError, match="not a regular file"):
        load_platform(fifo)
    res = _cli("select", "--np", "2", "--size", "8", "--table", str(fifo))
    assert res.returncode == 2 and "not a regular file" in res.stderr, res.stderr


# --- 4. option values ---------------------------------------------------------------------


def test_minus_k_shows_escape_sequences_escaped():
    with pytest.raises(UsageError) as info:
        parse_root("\x1b[31mx")
    assert "\x1b" not in str(info.value) and "\\x1b" in str(info.value)


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200b", "\ufeff"])
def test_bidi_and_format_characters_are_refused_in_a_batch_script(char):
    args = argparse.Namespace(partition=f"gpu{char}x")
    with pytest.raises(UsageError, match="--partition") as info:
        check_script_values(args)
    assert char not in str(info.value)


def test_a_platform_number_above_the_bound_names_the_bound(tmp_path):
    data = _platform()
    data["links"]["intra"]["alpha_beta"][0]["alpha_s"] = 1e308
    path = _write(tmp_path / "p.json", json.dumps(data))
    with pytest.raises(PlatformError, match=r"expected a number from 0 to 1e\+300, got 1e\+308"):
        load_platform(path)


def test_an_empty_platform_list_says_empty(tmp_path):
    data = _platform()
    data["links"]["intra"]["alpha_beta"] = []
    path = _write(tmp_path / "p.json", json.dumps(data))
    with pytest.raises(PlatformError, match="expected a non-empty list, got an empty list"):
        load_platform(path)


def test_a_repeated_parameter_is_refused():
    with pytest.raises(UsageError, match="seg given twice"):
        parse_variant("allreduce", "ring:seg=4K,seg=8K")


def test_a_repeated_algorithm_is_measured_once():
    assert [v.label for v in parse_variants("allreduce", "ring,ring")] == ["ring:seg=256K"]


def _bench(*argv):
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    return parser.parse_args(["allreduce", *argv])


def test_ranks_per_node_below_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        _bench("--ranks-per-node", "0")
    assert "expected a whole number >= 1, got '0'" in capsys.readouterr().err


def test_an_empty_minus_a_is_refused_at_parse():
    with pytest.raises(UsageError, match=r"expected NAME\[,NAME\] or all, got ''"):
        config_from_args(_bench("-a", ""))
