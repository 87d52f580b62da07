"""Errors that only some ranks meet end the whole job with a message, never a hang."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from mpirun import MPIEXEC, REPO, mpi_env, run_mpi, run_with_timeout

from osu_dl_bench.measurement.bench_config import host_memory_bytes
from osu_dl_bench.runtime.text import printable

DRIVER = str(REPO / "tests" / "drivers" / "uneven_errors.py")
CLI = [sys.executable, "-m", "osu_dl_bench.cli"]


def _mpmd(*parts: tuple, timeout: float = 90):
    """``mpiexec -n A [-wdir D] cmd... : -n B ...``: each part (nprocs, args[, workdir])
    runs its own command line, in its own directory where one is given."""
    cmd = [MPIEXEC]
    for i, (nprocs, args, *workdir) in enumerate(parts):
        cmd += [":"] if i else []
        cmd += ["-n", str(nprocs), *(["-wdir", str(workdir[0])] if workdir else [])]
        cmd += [*CLI, *args]
    return run_with_timeout(cmd, timeout, mpi_env())


def _two_copies_that_differ(tmp_path: Path) -> tuple[Path, Path]:
    """Directories a and b, each with a valid t.json that differs from the other's: the
    table of two nodes whose copies went out of step."""
    table = json.loads((REPO / "tuning_tables" / "reference-cpu-mpich-1node.json").read_text())
    first, second = tmp_path / "a", tmp_path / "b"
    for directory, name in ((first, "node a"), (second, "node b")):
        directory.mkdir()
        (directory / "t.json").write_text(json.dumps({**table, "name": name}))
    return first, second


def test_a_table_only_rank_0_can_read_fails_every_rank_with_one_message(tmp_path: Path):
    # One relative path, read from two directories: the table of a node whose copy is
    # missing. Today's main printed nothing and waited for the outer timeout.
    readable, unreadable = tmp_path / "a", tmp_path / "b"
    readable.mkdir(), unreadable.mkdir()
    shutil.copy(REPO / "tuning_tables" / "reference-cpu-mpich-1node.json", readable / "t.json")
    bench = ["bench", "allreduce", "-a", "tuned", "--table", "t.json", "-m", "8:64", "-i", "5"]
    proc = _mpmd((1, bench, readable), (2, bench, unreadable))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
    assert "rank 1 (and 1 other rank): --table t.json: cannot read: No such file" in proc.stderr


def test_an_option_only_one_rank_refuses_before_mpi_starts_fails_every_rank():
    bench = ["bench", "allreduce", "-m", "8:64", "-i", "5", "-x", "1"]
    proc = _mpmd((2, bench), (1, [*bench, "-i", "abc"]))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
    assert "rank 2: osu-dl-bench bench: argument -i/--iterations" in proc.stderr


def test_an_error_every_rank_meets_prints_once_and_exits_2():
    proc = run_mpi(3, [DRIVER, "every-rank"], timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error: bad input seen on rank any") == 1


def test_a_collective_refusing_mismatched_arguments_on_every_rank_exits_2_once():
    proc = run_mpi(2, [DRIVER, "count-mismatch"], timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error: allreduce (cma): rank 1 passed") == 1
    assert "Traceback" not in proc.stderr


def test_an_mpi_library_error_is_one_line_per_failing_rank_without_traceback():
    proc = run_mpi(2, [DRIVER, "truncated"], timeout=60)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "rank 0: the MPI library failed a call: Message truncated" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_error_one_rank_meets_after_start_up_is_said_by_it_and_aborts_the_job():
    proc = run_mpi(3, [DRIVER, "one-rank"], timeout=60)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "osu-dl-bench: error: rank 1: bad input seen on rank 1" in proc.stderr
    assert "aborting the job" in proc.stderr


def test_a_single_process_error_needs_no_mpi():
    proc = run_with_timeout([*CLI, "bench", "allreduce", "-i", "abc"], 60)
    assert proc.returncode == 2 and proc.stderr.count("osu-dl-bench: error:") == 1


def test_ranks_given_different_sizes_stop_with_one_message_instead_of_hanging():
    bench = ["bench", "allreduce", "-a", "cma,native", "-i", "2", "-x", "0"]
    proc = _mpmd((2, [*bench, "-m", "1:16"]), (1, [*bench, "-m", "1:8"]))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
    assert "rank 2 runs with max_size 8, rank 0 with 16" in proc.stderr


def test_training_refuses_ranks_whose_tables_differ(tmp_path: Path):
    pytest.importorskip("torch")
    first, second = _two_copies_that_differ(tmp_path)
    train = ["train", "--steps", "2", "-b", "8", "--table", "t.json"]
    proc = _mpmd((1, train, first), (1, train, second))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
    assert "rank 1 runs with table 't.json (sha256 " in proc.stderr


def test_bench_tables_that_differ_between_ranks_are_refused_before_any_call(tmp_path: Path):
    # Each copy would pick another algorithm for the same call: today's main hung.
    first, second = _two_copies_that_differ(tmp_path)
    bench = ["bench", "allreduce", "-a", "tuned", "--table", "t.json", "-m", "8:64", "-i", "5"]
    proc = _mpmd((1, bench, first), (1, bench, second))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
    assert "rank 1 runs with table 't.json (sha256 " in proc.stderr


def test_an_emulated_layout_set_on_one_rank_only_is_refused():
    bench = ["bench", "allreduce", "-a", "hierarchical,shm", "-m", "8K:8K", "-i", "5"]
    cmd = [MPIEXEC, "-n", "1", "-env", "OSU_DL_BENCH_RANKS_PER_NODE", "1", *CLI, *bench]
    cmd += [":", "-n", "1", *CLI, *bench]
    proc = run_with_timeout(cmd, 90, mpi_env())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "rank 1 runs with $OSU_DL_BENCH_RANKS_PER_NODE None, rank 0 with '1'" in proc.stderr


def test_ranks_running_different_commands_are_refused_at_start_up():
    proc = _mpmd((1, ["bench", "allreduce", "-m", "8:8", "-i", "5"]), (1, ["list"]))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "rank 1 runs list, rank 0 runs bench: every rank must run" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_full_disk_under_bench_o_stops_every_rank_with_one_message(tmp_path: Path):
    unshare = shutil.which("unshare")
    probe = unshare and run_with_timeout([unshare, "--mount", "true"], 30).returncode == 0
    if not probe:
        pytest.skip("no mount namespace here (unshare --mount) for a tiny tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    bench = [MPIEXEC, "-n", "2", *CLI, "bench", "allreduce", "-m", "8:64K", "-i", "50"]
    script = (
        f'mount -t tmpfs -o size=16k tmpfs "{disk}" && head -c 8000 /dev/zero > "{disk}/fill"'
        f' && "$@" -o "{disk}/r.csv"; code=$?; cp "{disk}/r.csv" "{tmp_path}/kept.csv"; exit $code'
    )
    proc = run_with_timeout([unshare, "--mount", "sh", "-c", script, "sh", *bench], 120, mpi_env())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
    assert "r.csv: cannot write (No space left on device)" in proc.stderr
    assert "Traceback" not in proc.stderr
    kept = (tmp_path / "kept.csv").read_text().splitlines()
    assert len(kept) > 1 and kept[0].startswith("collective,")  # the sizes before stay


def test_error_messages_escape_terminal_controls_in_echoed_values():
    assert (
        printable("-o a\x1b[31mb\u202ec\x07: bad\nnext") == "-o a\\x1b[31mb\\u202ec\\x07: bad\nnext"
    )
    proc = run_with_timeout([*CLI, "bench", "allreduce", "-o", "/nonexist\x1b[2J/x.csv"], 60)
    assert proc.returncode == 2 and "\x1b" not in proc.stderr
    assert "-o /nonexist\\x1b[2J/x.csv: directory" in proc.stderr


def test_an_output_path_rank_0_cannot_use_ends_every_rank_before_mpi_starts(tmp_path: Path):
    # Rank 0 checks -o before MPI starts while the others wait in MPI_Init for it.
    name = str(tmp_path / ("e" * 300 + ".csv"))
    proc = run_mpi(3, ["-m", "osu_dl_bench", "bench", "allreduce", "-m", "8:8", "-o", name], 60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
    assert ": File name too long" in proc.stderr and "Traceback" not in proc.stderr


UNEXPECTED_BEFORE_MPI = """
from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.launcher import launcher_rank
from osu_dl_bench.runtime.start import init_mpi

def body():
    if launcher_rank() == 0:
        raise OSError("a failure nobody foresaw")
    init_mpi()
    return 0

raise SystemExit(run_guarded(body))
"""


def test_an_unforeseen_error_before_mpi_starts_on_one_rank_ends_every_rank():
    proc = run_mpi(3, ["-c", UNEXPECTED_BEFORE_MPI], timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a failure, not bad input
    assert "error: rank 0: OSError: a failure nobody foresaw" in proc.stderr


def test_a_message_too_large_for_the_node_is_refused_on_every_rank(tmp_path: Path):
    # The largest power of two -m accepts here: with its copies it cannot fit twice.
    size = str(1 << (host_memory_bytes().bit_length() - 1))
    bench = ["bench", "allreduce", "-m", f"{size}:{size}", "-i", "2", "-x", "1"]
    sweep = ["sweep", "--inside", "-m", f"{size}:{size}", "--collectives", "allreduce"]
    latency = ["bench", "latency", "-m", f"{size}:{size}", "-i", "2", "-x", "1"]
    for argv in (bench, [*sweep, "-a", "native", "-o", str(tmp_path / "run")], latency):
        proc = run_mpi(2, ["-m", "osu_dl_bench", *argv], timeout=60)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
        assert f"{argv[1] if argv[0] == 'bench' else 'allreduce'} at p = 2 holds at least" in (
            proc.stderr
        )
        assert "more than the" in proc.stderr and "choose a smaller -m" in proc.stderr


@pytest.mark.parametrize("value", ["abc", "-1"])
def test_an_emulated_node_size_that_is_no_count_ends_every_rank_with_one_message(value):
    bench = ["-m", "osu_dl_bench", "bench", "allreduce", "-m", "8:8", "-i", "2", "-x", "1"]
    proc = run_mpi(3, bench, timeout=60, env={"OSU_DL_BENCH_RANKS_PER_NODE": value})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
    assert f"OSU_DL_BENCH_RANKS_PER_NODE='{value}': expected a whole number" in proc.stderr


def test_a_thread_level_in_the_environment_that_names_none_ends_every_rank_with_one_message():
    bench = ["-m", "osu_dl_bench", "bench", "allreduce", "-m", "8:8", "-i", "2", "-x", "1"]
    proc = run_mpi(2, bench, timeout=60, env={"MPI4PY_RC_THREAD_LEVEL": "garbage"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("osu-dl-bench: error:") == 1, proc.stderr
    assert "MPI4PY_RC_THREAD_LEVEL='garbage': expected one of single" in proc.stderr
    assert "RuntimeWarning" not in proc.stderr
