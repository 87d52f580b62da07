"""Option parsing, sizes and the per-collective facts: pure Python, no MPI job."""

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectives import SPECS, CallShape
from collectives.dtypes import ELEMENT_TYPES, element_type
from collectives.ops import REDUCE_OPS, reduce_op
from collectives.specs import input_values
from collectives.units import format_size, parse_size
from osu_dl_bench.commands.bench_cli import add_arguments, config_from_args
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement import records
from osu_dl_bench.measurement.bench_config import (
    host_memory_bytes,
    parse_root,
    parse_size_range,
)


def _config(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))


# No deadline: one example held off the 2 shared cores is not a failure.
@settings(deadline=None)
@given(st.integers(min_value=0, max_value=1 << 40))
def test_format_then_parse_size_round_trips(nbytes):
    assert parse_size(format_size(nbytes)) == nbytes


@pytest.mark.parametrize(
    "text,expected", [("8", 8), ("64K", 65536), ("16M", 16 << 20), ("1g", 1 << 30), ("4KiB", 4096)]
)
def test_parse_size_suffixes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "8X", "1.5M", "M"])
def test_parse_size_rejects_garbage(text):
    with pytest.raises(UsageError, match="bad size"):
        parse_size(text)


def test_sizes_double_from_min_to_max():
    assert _config("allreduce", "-m", "8:64").sizes() == [8, 16, 32, 64]
    assert _config("allreduce", "-m", "4K").sizes()[0] == 1
    assert _config("latency", "-m", "0:4").sizes() == [0, 1, 2, 4]


def test_inverted_range_is_a_usage_error():
    with pytest.raises(UsageError, match="larger than maximum"):
        _config("allreduce", "-m", "16M:8")


def test_osu_default_iterations_switch_above_8k():
    cfg = _config("allreduce")
    assert cfg.iterations_for(8192) == (1000, 100)
    assert cfg.iterations_for(16384) == (100, 10)
    assert _config("allreduce", "-i", "7", "-x", "3").iterations_for(1 << 20) == (7, 3)


def test_root_policy():
    assert parse_root("rotate").root_at(5, 4) == 1
    assert parse_root("fixed:2").root_at(5, 4) == 2
    for bad in ("fixed", "fixed:-1", "spin"):
        with pytest.raises(UsageError, match="expected fixed:N"):
            parse_root(bad)


def test_dtype_aliases_and_errors():
    assert element_type("mpi_float").name == "float32"
    assert element_type("MPI_DOUBLE").name == "float64"
    with pytest.raises(UsageError, match="unknown datatype 'float128'"):
        element_type("float128")


def test_bitwise_ops_need_integers():
    reduce_op("band").check_dtype(element_type("int32"))
    with pytest.raises(UsageError, match="not valid for float32"):
        reduce_op("band").check_dtype(element_type("float32"))


# No deadline: one example held off the 2 shared cores is not a failure.
@settings(deadline=None)
@given(
    st.sampled_from(sorted(ELEMENT_TYPES)),
    st.sampled_from(["sum", "prod", "max", "min"]),
    st.integers(1, 64),
    st.integers(0, 300),
)
def test_inputs_are_exact_in_every_dtype(dtype_name, op_name, nprocs, n):
    """Inputs are small integers, so reductions of them are exact in every dtype."""
    dtype = ELEMENT_TYPES[dtype_name].dtype
    op = REDUCE_OPS[op_name]
    for rank in {0, nprocs - 1}:
        values = input_values(rank, 0, n, dtype, op, nprocs)
        assert values.dtype == dtype and len(values) == n
        assert np.all(values.astype(np.int64) == input_values(rank, 0, n, np.int64, op, nprocs))
    if op_name == "prod":
        shape = CallShape(n, nprocs, 0, 0, False)
        assert np.all(SPECS["allreduce"].expected(shape, dtype, op) <= 3)


def test_bus_bandwidth_factors_follow_nccl_tests():
    assert SPECS["allreduce"].busbw_factor(4) == pytest.approx(1.5)
    assert SPECS["allgather"].busbw_factor(4) == pytest.approx(0.75)
    assert SPECS["bcast"].busbw_factor(4) == 1.0
    assert SPECS["allgather"].algbw_bytes(1024, 4) == 4096


def test_a_size_of_thousands_of_digits_is_a_usage_error():
    with pytest.raises(UsageError, match="bad size"):
        parse_size("9" * 5000)


@pytest.mark.parametrize("text", ["1:1024G", f"1:{host_memory_bytes() + 1}", "1:99999999999999G"])
def test_sizes_past_this_hosts_memory_are_refused_before_anything_is_allocated(text):
    with pytest.raises(UsageError, match=f"-m {text}: sizes above .* are refused"):
        _config("allreduce", "-m", text)


def test_sizes_that_are_only_modelled_may_exceed_this_hosts_memory():
    assert parse_size_range("8:4G", 8) == (8, 4 << 30)
    with pytest.raises(UsageError, match="sizes above"):
        parse_size_range("8:99999999999999999G", 8)


def test_a_collective_needs_a_size_that_holds_an_element():
    with pytest.raises(UsageError, match="-m 0:0: no size holds one element"):
        _config("allreduce", "-m", "0:0")
    assert _config("latency", "-m", "0:0").sizes() == [0]  # OSU's zero-byte latency
    assert _config("barrier", "-m", "0:0").sizes() == [0]


@pytest.mark.parametrize(
    "flag,text",
    [("-i", "0"), ("-i", "10000001"), ("-i", "1e3"), ("-x", "-1"), ("-x", "100000000000")],
)
def test_iterations_and_warmup_are_capped(capsys, flag, text):
    with pytest.raises(SystemExit):
        _config("allreduce", flag, text)
    least = 1 if flag == "-i" else 0
    assert (
        f"expected a whole number from {least} to 10000000, got {text!r}" in capsys.readouterr().err
    )


def test_the_largest_iteration_counts_are_accepted():
    assert _config("allreduce", "-i", "10000000", "-x", "0").iterations_for(8) == (10_000_000, 0)


def _entries(path):
    return sorted(p.name for p in path.iterdir())


def test_an_output_path_that_is_a_directory_is_refused_leaving_nothing(tmp_path):
    (tmp_path / "out.csv").mkdir()
    with pytest.raises(UsageError, match="is a directory"):
        records.check_output_path(str(tmp_path / "out.csv"))
    assert _entries(tmp_path) == ["out.csv"]


def test_an_output_path_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is not a directory"):
        records.check_output_path(str(tmp_path / "file" / "out.csv"))


def test_an_output_directory_that_cannot_be_written_is_refused():
    # /proc refuses new files even to root.
    with pytest.raises(UsageError, match="-o /proc/out.csv: cannot create files in /proc"):
        records.check_output_path("/proc/out.csv")


def test_a_writable_output_path_passes_and_the_probe_leaves_nothing(tmp_path):
    records.check_output_path(str(tmp_path / "out.json"))
    assert _entries(tmp_path) == []


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def broken(self, path, *args, **kwargs):
        Path(path).write_text("[{")  # half written when the disk fills
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_json", broken)
    with pytest.raises(OSError):
        records.write_records(str(tmp_path / "out.json"), [], {})
    assert _entries(tmp_path) == []


def test_minus_k_shows_escape_sequences_escaped():
    with pytest.raises(UsageError) as info:
        parse_root("\x1b[31mx")
    assert "\x1b" not in str(info.value) and "\\x1b" in str(info.value)


def _bench(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["allreduce", *argv])


def test_ranks_per_node_below_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        _bench("--ranks-per-node", "0")
    assert "expected a whole number >= 1, got '0'" in capsys.readouterr().err


def test_an_empty_minus_a_is_refused_at_parse():
    with pytest.raises(UsageError, match=r"expected NAME\[,NAME\] or all, got ''"):
        config_from_args(_bench("-a", ""))
