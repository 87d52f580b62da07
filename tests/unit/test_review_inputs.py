"""Inputs a hostile review found mishandled: infinite statistics in a run, segments held
through a second path, FIFOs given as JSON files, and option values that slipped past."""

from __future__ import annotations

import argparse
import json
import math
import os

import pytest
from support.files import fake_segment, platform_json, stale_names, write_file
from support.tuning import model_points, write_run

from collectives.registry import parse_variant, parse_variants
from osu_dl_bench.commands.bench_options import add_bench_arguments, config_from_args
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.options import check_script_values
from osu_dl_bench.measurement.options import parse_root
from osu_dl_bench.model.platform import PlatformError, load_platform
from osu_dl_bench.selection import build_table
from osu_dl_bench.selection.table import TableError


def test_a_table_with_a_non_finite_number_is_not_written(tmp_path):
    table, _ = build_table(write_run(tmp_path / "run", model_points(nprocs_list=(2,))))
    table.entries[0].points[0]["median_us"] = math.inf
    with pytest.raises(TableError, match="not a finite number"):
        table.write(tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


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


def test_minus_k_shows_escape_sequences_escaped():
    with pytest.raises(UsageError) as info:
        parse_root("\x1b[31mx")
    assert "\x1b" not in str(info.value) and "\\x1b" in str(info.value)


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200b", "\ufeff"])
def test_bidi_and_format_characters_are_refused_in_a_batch_script(char):
    args = argparse.Namespace(partition=f"gpu{char}x")
    with pytest.raises(UsageError, match="--partition") as info:
        check_script_values(vars(args))
    assert char not in str(info.value)


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
