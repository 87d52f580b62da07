"""Run directories that went wrong: rows cut by a full disk, rows of the wrong shape, a
second command into a directory in use, and a full disk in the middle of a real sweep;
and what the metadata keeps of each launch."""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import socket
from pathlib import Path

import pytest
from support.sweep import (
    cut_last_row,
    stored_run,
    sweep_point,
)
from support.tuning import model_points, write_run

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import orchestrate, runinfo
from osu_dl_bench.measurement import store as store_module
from osu_dl_bench.measurement.store import LOCK, POINT_KEY, SWEEP_FIELDS, RunStore, StoreError
from osu_dl_bench.selection import build_table

HEADER = ",".join(SWEEP_FIELDS)


def test_a_cut_last_row_is_dropped_and_cut_off_before_appending(tmp_path, capsys):
    store = stored_run(tmp_path, [8, 16, 32])
    cut_last_row(store.results_path, keep=60)  # past the key fields: the statistics are missing
    frame = store.load()
    assert sorted(frame["size_bytes"]) == [8, 16]
    warning = capsys.readouterr().err
    assert "osu-dl-bench: warning:" in warning and "dropped 1 row" in warning
    assert f"{store.results_path}: dropped 1 row that cannot be used (line 4: cut short)" in (
        warning
    )
    assert (1, 1, 1, "allreduce", "mpi", "native", "float32", "sum", "cpu", 32) not in (
        store.finished_points()
    )

    store.append([sweep_point(32), sweep_point(64)])  # --resume measures the cut row again
    frame, notes = store.read()
    assert notes == [] and sorted(frame["size_bytes"]) == [8, 16, 32, 64]
    assert len(store.results_path.read_text().splitlines()) == 5


def test_a_file_cut_inside_its_header_counts_as_empty(tmp_path):
    store = RunStore(tmp_path)
    store.results_path.write_text(HEADER[:30])
    frame, notes = store.read()
    assert frame.empty and list(frame.columns) == list(SWEEP_FIELDS) and notes
    store.append([sweep_point(8)])
    assert store.read()[0]["size_bytes"].tolist() == [8]


def _damaged(tmp_path: Path) -> RunStore:
    """Good rows around: a cut row with a whole row appended onto it (what --resume used
    to write), a row without statistics, and one with text where a number belongs."""
    store = stored_run(tmp_path, [8])
    good = store.results_path.read_text().splitlines()[1]
    fields = good.split(",")
    lines = [
        ",".join(fields[:5]) + good,  # 5 more fields, less one
        ",".join(fields[:11] + ["nan"] * 4 + fields[15:]).replace(",8,", ",16,", 1),
        ",".join(fields[:12] + ["abc"] + fields[13:]).replace(",8,", ",32,", 1),
        good.replace(",8,", ",64,", 1),
    ]
    with store.results_path.open("a") as handle:
        handle.write("\n".join(lines) + "\n")
    return store


def test_rows_of_the_wrong_shape_or_without_statistics_are_dropped_and_counted(tmp_path):
    store = _damaged(tmp_path)
    frame, notes = store.read()
    assert frame["size_bytes"].tolist() == [8, 64]
    assert frame["median_us"].dtype.kind == "f" and frame["nprocs"].dtype.kind == "i"
    assert len(notes) == 1 and "dropped 3 rows" in notes[0]
    for text in (
        f"line 3: {len(SWEEP_FIELDS) + 4} fields, expected {len(SWEEP_FIELDS)}",
        "line 4: no median_us",
        "line 5: q1_us 'abc' is not a number",
    ):
        assert text in notes[0]
    assert {key[POINT_KEY.index("size_bytes")] for key in store.finished_points()} == {8, 64}


def test_a_broken_metadata_file_is_a_clean_error(tmp_path):
    store = RunStore(tmp_path)
    (tmp_path / "metadata.json").write_text('{\n "jobs": {\n')
    with pytest.raises(UsageError, match=r"metadata.json line 3: not JSON"):
        store.read_metadata()


@pytest.mark.parametrize(
    "text,problem",
    [
        ("[1, 2]", "expected a JSON object, got a list"),
        ('{"jobs": 5}', "jobs: expected an object, got a whole number"),
        ('{"jobs": {"2": [1]}}', "jobs.2: expected an object, got a list"),
        ('{"hosts": {}}', "hosts: expected a list, got an object"),
    ],
)
def test_metadata_that_is_json_but_not_a_runs_metadata_is_a_clean_error(tmp_path, text, problem):
    (tmp_path / "metadata.json").write_text(text)
    with pytest.raises(UsageError, match=f"metadata.json: not a sweep's metadata \\({problem}\\)"):
        RunStore(tmp_path).read_metadata()


@pytest.mark.parametrize(
    "code,remedy",
    [(errno.ENOSPC, "make room"), (errno.EDQUOT, "make room"), (errno.EROFS, "make it writable")],
)
def test_a_failed_write_says_the_remedy_for_its_cause(tmp_path, monkeypatch, code, remedy):
    def fails(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(store_module, "write_text_atomic", fails)
    with pytest.raises(StoreError) as failed:
        RunStore(tmp_path).write_metadata({})
    assert f"{os.strerror(code)}): the results stored before it are kept; {remedy} and" in str(
        failed.value
    )


def test_a_held_run_directory_refuses_a_second_lock_naming_the_holder(tmp_path):
    store = RunStore(tmp_path / "run")
    with store.lock():
        with pytest.raises(UsageError) as refused:
            store.lock()
        assert str(store.path) in str(refused.value)
        assert f"pid {os.getpid()}" in str(refused.value)
    store.lock().release()  # free again once released


def test_a_refusal_names_the_holders_command_and_the_option_that_names_the_folder(tmp_path):
    store = RunStore(tmp_path / "run")
    holder = store.lock("scripts/bench_collectives.py --run-dir run", "--run-dir")
    with holder, pytest.raises(UsageError) as refused:
        store.lock("osu-dl-bench train-bench --out run", "--out")
    holder = f"pid {os.getpid()} on {socket.gethostname()}: scripts/bench_collectives.py"
    assert f"is in use by another run ({holder} --run-dir run)" in str(refused.value)
    assert str(refused.value).endswith("wait for it to end, or choose another --out")
    # A holder of an older version wrote only its pid and host.
    (store.path / LOCK).write_text("pid 1 on elsewhere\n")
    with open(store.path / LOCK) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(UsageError, match=r"in use by another run \(pid 1 on elsewhere\): "):
            store.lock()


def test_a_launch_is_stored_once_and_the_run_wide_fields_come_from_every_launch(tmp_path):
    store = RunStore(tmp_path)
    first = {"started": "t1", "hosts": ["a"], "nodes": 1, "ppn": 2, "mpi_library": "MPICH"}
    second = {"started": "t2", "hosts": ["b"], "nodes": 2, "ppn": 1, "rows": ["only-here"]}
    runinfo.record_job(store, 2, first, "1/mpi")
    runinfo.record_job(store, 2, second, "1/gloo")
    metadata = store.read_metadata()
    assert metadata["jobs"] == {"2": {"launches": {"1/mpi": first, "1/gloo": second}}}
    assert json.dumps(metadata).count("only-here") == 1
    assert (metadata["hosts"], metadata["nodes"], metadata["ppn"]) == (["a", "b"], 2, 2)
    assert metadata["mpi_library"] == "MPICH"  # kept from the job that said it


def test_a_metadata_failure_after_a_failed_job_does_not_hide_the_first(
    tmp_path, monkeypatch, capsys
):
    def job_fails(*args):
        raise orchestrate.JobFailed(2)

    def disk_full(store, complete, **fields):
        raise StoreError(f"cannot write {store.path / 'metadata.json'} (full)", "make room")

    monkeypatch.setattr(orchestrate, "_run_jobs", job_fails)
    monkeypatch.setattr(runinfo, "record_session", lambda *args, **kwargs: None)
    monkeypatch.setattr(runinfo, "record_completion", disk_full)
    cfg = _sweep_config(tmp_path / "run")
    with pytest.raises(orchestrate.JobFailed):
        orchestrate._launch_all(cfg, {(2, 1, "mpi"): {"todo": 1}})
    err = capsys.readouterr().err
    assert "osu-dl-bench: error:" not in err
    assert "osu-dl-bench: note: could not also mark the run incomplete: cannot write" in err
    assert err.rstrip().endswith("metadata.json (full)")  # no second piece of advice


def _sweep_config(run_dir: Path):
    from osu_dl_bench.cli import build_parser
    from osu_dl_bench.commands.sweep_cli import config_from_args

    return config_from_args(build_parser().parse_args(["sweep", "--np", "2", "-o", str(run_dir)]))


def test_a_results_file_with_a_byte_order_mark_reads_and_resumes(tmp_path):
    store = stored_run(tmp_path, [8, 16])
    data = store.results_path.read_bytes()
    store.results_path.write_bytes(b"\xef\xbb\xbf" + data)  # as a spreadsheet saves it
    frame, notes = store.read()
    assert frame["size_bytes"].tolist() == [8, 16] and notes == []
    store.check_appendable()  # the header is read without the mark
    store.append([sweep_point(32)])
    assert store.read()[0]["size_bytes"].tolist() == [8, 16, 32]


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
