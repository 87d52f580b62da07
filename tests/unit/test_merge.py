"""``osu-dl-bench merge``: run directories become one, rows in the order given (a point
measured twice keeps the last run's row for readers), jobs and hosts of every run in the
metadata, and outputs that would mix with a run's files refused."""

import json

import pytest
from support.tuning import METADATA, model_points, write_run

from osu_dl_bench.cli import main
from osu_dl_bench.measurement.store import RunStore


def _meta(nprocs, host, started):
    job = {"nprocs": nprocs, "hosts": [host], "nodes": 1, "ppn": nprocs, "started": started}
    return {**METADATA, "hosts": [host], "nprocs": [nprocs], "jobs": {str(nprocs): job}}


def _runs(tmp_path, hosts=("a", "a", "a")):
    p2 = write_run(tmp_path / "p2", model_points(nprocs_list=(2,)), _meta(2, hosts[0], "t1"))
    p4 = write_run(tmp_path / "p4", model_points(nprocs_list=(4,)), _meta(4, hosts[1], "t2"))
    again = model_points(nprocs_list=(2,), seed=9)
    return p2, p4, write_run(tmp_path / "p2b", again, _meta(2, hosts[2], "t3"))


def test_merged_rows_follow_the_runs_in_order(tmp_path):
    p2, p4, _ = _runs(tmp_path)
    assert main(["merge", str(p2), str(p4), "-o", str(tmp_path / "all")]) == 0
    merged = RunStore(tmp_path / "all").load()
    parts = [RunStore(p).load() for p in (p2, p4)]
    assert len(merged) == sum(len(p) for p in parts)
    assert merged["nprocs"].tolist() == [*parts[0]["nprocs"], *parts[1]["nprocs"]]
    assert merged["median_us"].tolist() == [*parts[0]["median_us"], *parts[1]["median_us"]]
    assert merged["op"].isna().sum() == sum(p["op"].isna().sum() for p in parts)  # bcast


def test_the_metadata_holds_every_job_and_host(tmp_path, capsys):
    p2, p4, again = _runs(tmp_path, hosts=("a", "b", "c"))
    out = tmp_path / "all"
    argv = ["merge", str(p2), str(p4), str(again), "-o", str(out), "--allow-mixed"]
    assert main(argv) == 0
    meta = json.loads((out / "metadata.json").read_text())
    assert sorted(meta["jobs"]) == ["2", "4"] and meta["hosts"] == ["a", "b", "c"]
    assert meta["jobs"]["2"]["started"] == "t3"  # the later run's job, the earlier kept
    assert [j["started"] for j in meta["jobs"]["2"]["previous"]] == ["t1"]
    assert meta["nprocs"] == [2, 4] and meta["ppn"] == 4
    assert [m["run_dir"] for m in meta["merged_from"]] == [str(p2), str(p4), str(again)]
    assert [m["hosts"] for m in meta["merged_from"]] == [["a"], ["b"], ["c"]]
    assert "rows measure a point again" in capsys.readouterr().out


def test_the_layout_comes_from_each_launch_as_jobs_record_them(tmp_path):
    """A run's jobs keep one entry per launch (jobs.runinfo.record_job): the merged nodes
    and ppn are the largest of every launch's."""
    runs = []
    for nprocs, name in ((2, "p2"), (4, "p4")):
        launch = {"hosts": ["a"], "nodes": 1, "ppn": nprocs}
        jobs = {str(nprocs): {"launches": {"1/mpi": launch, "2/mpi": launch}}}
        meta = {**METADATA, "hosts": ["a"], "nprocs": [nprocs], "jobs": jobs}
        runs.append(str(write_run(tmp_path / name, model_points(nprocs_list=(nprocs,)), meta)))
    assert main(["merge", *runs, "-o", str(tmp_path / "all")]) == 0
    meta = json.loads((tmp_path / "all" / "metadata.json").read_text())
    assert (meta["nodes"], meta["ppn"]) == (1, 4)


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["p2", "-o", "x"], "expected at least two run directories, got 1"),
        (["p2", "p2", "-o", "x"], "a run directory is given twice"),
        (["p2", "p4", "-o", "p4"], "-o p4: is one of the runs to merge"),
        (["p2", "none", "-o", "x"], "none: no results.csv"),
        (["p2", "p4", "-o", "p2b"], "-o p2b: already holds results.csv"),
    ],
)
def test_outputs_that_would_mix_with_a_run_are_refused(
    tmp_path, monkeypatch, capsys, argv, expected
):
    _runs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["merge", *argv]) == 2
    assert expected in capsys.readouterr().err


def test_a_directory_with_other_files_takes_the_merge(tmp_path):
    p2, p4, _ = _runs(tmp_path)
    out = tmp_path / "model"
    out.mkdir()
    (out / "calibration.csv").write_text("kept\n")
    assert main(["merge", str(p2), str(p4), "-o", str(out)]) == 0
    assert (out / "calibration.csv").read_text() == "kept\n" and (out / "results.csv").exists()


@pytest.mark.parametrize(
    "field,value",
    [("mpi_library", "Open MPI v5.0.8"), ("mpi_version", "3.1"), ("hosts", ["elsewhere"])],
)
def test_runs_of_another_library_version_or_machine_are_refused_unless_allowed(
    tmp_path, capsys, field, value
):
    p2, p4, _ = _runs(tmp_path)
    meta = RunStore(p4).read_metadata()
    RunStore(p4).write_metadata({**meta, field: value})
    assert main(["merge", str(p2), str(p4), "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert f"differ in {field}" in err and "--allow-mixed" in err
    assert not (tmp_path / "x" / "results.csv").exists()
    assert main(["merge", str(p2), str(p4), "-o", str(tmp_path / "y"), "--allow-mixed"]) == 0
    merged = json.loads((tmp_path / "y" / "metadata.json").read_text())
    assert merged["merged_from"][1][field] == value


def test_allow_mixed_names_what_may_differ(tmp_path, capsys):
    p2, p4, _ = _runs(tmp_path, hosts=("a", "b", "a"))
    meta = RunStore(p4).read_metadata()
    RunStore(p4).write_metadata({**meta, "mpi_library": "Open MPI v5.0.8"})
    argv = ["merge", str(p2), str(p4), "-o", str(tmp_path / "x"), "--allow-mixed", "hosts"]
    assert main(argv) == 2
    assert "differ in mpi_library" in capsys.readouterr().err  # hosts allowed, not library
    assert main([*argv[:-1], "hosts,library"]) == 0
    assert main([*argv[:-2], "-o", str(tmp_path / "y"), "--allow-mixed", "colour"]) == 2
    assert "'colour' is none of library, version, hosts" in capsys.readouterr().err


@pytest.mark.parametrize(
    "field,value,problem",
    [
        ("collectives", 5, "collectives: expected a list, got a whole number"),
        ("nprocs", ["x"], "nprocs: expected a list of whole numbers"),
    ],
)
def test_metadata_merge_cannot_read_is_refused_before_anything_is_written(
    tmp_path, capsys, field, value, problem
):
    p2, p4, _ = _runs(tmp_path)
    meta = RunStore(p4).read_metadata()
    (p4 / "metadata.json").write_text(json.dumps({**meta, field: value}))
    assert main(["merge", str(p2), str(p4), "-o", str(tmp_path / "x")]) == 2
    assert problem in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
