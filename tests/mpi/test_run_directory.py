"""Run directories that went wrong: rows cut by a full disk, rows of the wrong shape, a
second sweep into a directory in use, and a full disk in the middle of a real sweep."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mpirun import MPIEXEC, mpi_env, run_cli, run_with_timeout
from support.sweep import (
    cut_last_row,
    difference,
    expected_rows,
    mpi_group_algorithms,
    stored_rows,
    stored_run,
)
from support.tuning import model_points, write_run

from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import SWEEP_FIELDS, RunStore
from osu_dl_bench.selection import build_table

HEADER = ",".join(SWEEP_FIELDS)


def test_tune_reads_a_damaged_run_directory_and_warns(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,)))
    results = RunStore(run).results_path
    cut_last_row(results, keep=40)
    table, warnings = build_table(run)
    assert table.entries and any("dropped 1 row" in w for w in warnings)
    res = run_cli(1, ["tune", str(run), "-o", str(tmp_path / "t.json")], timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "# warning:" in res.stdout and "dropped 1 row" in res.stdout


@pytest.mark.parametrize(
    "content,message",
    [
        (HEADER.encode() + b"\n" + b"allreduce,\xff\xfe\n", "line 2: not UTF-8 text"),
        (b"size,time\n8,1.0\n", "line 1: not a sweep results file, missing columns"),
    ],
)
def test_unreadable_results_are_one_clean_error_naming_file_and_line(tmp_path, content, message):
    store = RunStore(tmp_path / "run")
    store.create()
    store.results_path.write_bytes(content)
    with pytest.raises(UsageError, match=message):
        store.read()
    res = run_cli(1, ["tune", str(store.path), "-o", str(tmp_path / "t.json")], timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("osu-dl-bench: error:") == 1
    assert f"{store.results_path} {message}" in res.stderr


@pytest.mark.parametrize("mode", ["orchestrator", "inside", "submit"])
def test_a_second_sweep_into_a_directory_in_use_is_refused(tmp_path, mode):
    store = stored_run(tmp_path, [8])
    before = store.results_path.read_bytes()
    argv = ["sweep", "--np", "2", "--collectives", "allreduce", "-m", "8:16", "--budget", "0.02"]
    argv += ["--resume", "-o", str(store.path)]
    with store.lock():
        if mode == "inside":
            res = run_cli(2, [*argv, "--inside"], timeout=120)
        else:
            extra = ["--submit", "--dry-run"] if mode == "submit" else []
            cmd = [sys.executable, "-m", "osu_dl_bench", *argv, *extra]
            res = run_with_timeout(cmd, 120, mpi_env())
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("osu-dl-bench: error:") == 1 and "Traceback" not in res.stderr
    assert f"{store.path} is in use by another run (pid {os.getpid()}" in res.stderr
    assert store.results_path.read_bytes() == before
    assert not (store.path / "sweep.sbatch").exists()


def _private_mount() -> list[str] | None:
    """An unshare command giving the sweep a mount namespace of its own (None if this
    machine allows none), so a tiny tmpfs can stand in for a full disk."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    cmd = [unshare, "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    probe = subprocess.run([*cmd, "true"], capture_output=True)
    return cmd if probe.returncode == 0 else None


def _on_a_tiny_disk(cmd: list[str], run_dir: Path, pages: int = 6) -> subprocess.CompletedProcess:
    """Run ``cmd -o DIR`` with DIR on a tmpfs of ``pages`` 4 KiB pages (6: metadata.json and
    its replacement, two pages each since launches are recorded, and two pages of results),
    then copy what it left to run_dir: the tmpfs goes with the namespace. Skips the test
    where no mount namespace can be had."""
    unshare = _private_mount()
    if unshare is None:
        pytest.skip("no mount namespace here (unshare --mount) for a tiny tmpfs")
    mount = run_dir.with_name(run_dir.name + "-disk")
    mount.mkdir()
    script = (
        f'mount -t tmpfs -o size={4 * pages}k tmpfs "{mount}" && "$@" -o "{mount}"; code=$?; '
        f'cp -a "{mount}" "{run_dir}"; exit $code'
    )
    return run_with_timeout([*unshare, "sh", "-c", script, "sh", *cmd], 300, mpi_env())


def test_a_full_disk_stops_the_sweep_with_one_error_and_resume_completes_it(tmp_path):
    run_dir = tmp_path / "run"
    args = ["--np", "2", "--collectives", "allreduce", "-m", "8:256", "--budget", "0.02"]
    args += ["--launches", "1", "--no-calibration"]  # the tiny disk holds points only
    # Without the null control's launches of their own, whose records grow metadata.json:
    # the 24 KiB disk is sized for the results file to be the one a write cuts short.
    args += ["--no-null"]
    # One isolation group: with gloo's launch drawn first, its records would fill the
    # disk before a row of the MPI group is cut.
    names = mpi_group_algorithms("allreduce")
    args += ["-a", ",".join(names)]
    sweep = [sys.executable, "-m", "osu_dl_bench", "sweep", *args]
    full = _on_a_tiny_disk(sweep, run_dir, pages=7)  # and a page for the job's spec (jobs/)
    assert full.returncode == 2, full.stdout + full.stderr
    assert full.stderr.count("osu-dl-bench: error:") == 1, full.stderr
    assert "Traceback" not in full.stderr and "MPI_Abort" not in full.stderr, full.stderr
    assert "No space left on device" in full.stderr and "--resume" in full.stderr
    assert "could not also mark the run incomplete" in full.stderr  # the second failure
    raw = (run_dir / "results.csv").read_bytes()
    assert raw and not raw.endswith(b"\n"), "expected a row cut by the full disk"
    before, notes = RunStore(run_dir).read()
    assert notes and "cut short" in notes[0]

    cmd = [*sweep, "--resume", "-o", str(run_dir)]
    resumed = run_with_timeout(cmd, 300, mpi_env())
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "dropped 1 row" in resumed.stderr  # said once, by the orchestrator
    assert resumed.stderr.count("osu-dl-bench: warning:") == 1, resumed.stderr
    after, notes = RunStore(run_dir).read()
    assert notes == [], notes
    rows = stored_rows(after)
    assert len(rows) == len(set(rows)), "a point was measured twice"
    want = expected_rows([2], ["allreduce"], [8 << k for k in range(6)], names, null=False)
    assert set(rows) == want, difference(set(rows), want)
    assert not after[["median_us", "q1_us", "q3_us", "busbw_gbs"]].isna().any().any()
    kept = stored_rows(before)
    assert kept == rows[: len(kept)], "resume rewrote earlier results"
    assert json.loads((run_dir / "metadata.json").read_text())["complete"] is True


def test_a_full_disk_inside_a_job_stops_the_ranks_waiting_for_a_smaller_count(tmp_path):
    # Rank 2 waits while ranks 0 and 1 measure --np 2; the disk fills meanwhile.
    args = ["sweep", "--inside", "--np", "2,3", "--collectives", "allreduce", "-m", "8:256"]
    job = [MPIEXEC, "-n", "3", sys.executable, "-m", "osu_dl_bench", *args, "--budget", "0.02"]
    full = _on_a_tiny_disk(job, tmp_path / "run")  # a hang fails here, after its timeout
    assert full.returncode == 2, full.stdout + full.stderr
    assert full.stderr.count("osu-dl-bench: error:") == 1, full.stderr
    assert "No space left on device" in full.stderr and "Traceback" not in full.stderr


# A run directory written before jobs read a spec (a sweep of main at e6693a9, --launches
# 1): its metadata records each job's command line, 'sweep --inside --orchestrated ...'.
ARGV_ERA_RUN = Path(__file__).parents[1] / "data" / "argv_era_run"


def test_a_run_written_when_jobs_parsed_a_command_line_resumes_with_specs(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ARGV_ERA_RUN, run)
    old = json.loads((run / "metadata.json").read_text())["jobs"]["2"]["launches"]["1/mpi"]
    assert "--orchestrated" in old["command"]
    argv = ["sweep", "--np", "2", "--collectives", "allreduce", "-a", "native,ring", "-m", "8:16"]
    argv += ["--budget", "0.1", "--launches", "2", "--no-calibration", "--resume", "-o", str(run)]
    res = run_with_timeout([sys.executable, "-m", "osu_dl_bench", *argv], 300, mpi_env())
    assert res.returncode == 0, res.stdout + res.stderr
    frame = RunStore(run).load()
    assert sorted(frame.groupby("launch").size().items()) == [(1, 6), (2, 6)]
    # Launch 1 was stored by the old run: only launch 2 ran, from a spec of its own.
    assert sorted(p.name for p in (run / "jobs").iterdir()) == ["p2-2-mpi.json"]
