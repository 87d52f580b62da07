"""The experiment engine's launch records (jobs/experiment.py) without a job: each launch's
record kept in the run directory as its job ends, its collective points in results.csv, a
resume that runs only the launches without a complete record (and neither loses nor
repeats rows after a kill at any moment), the options a resume must repeat, and one run
directory however its option spells it."""

import json
import os
from dataclasses import asdict

import pytest

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import runinfo
from osu_dl_bench.jobs.experiment import RecordedExperiment, run_recorded
from osu_dl_bench.jobs.orchestrate import JobFailed, JobOutcome
from osu_dl_bench.measurement.store import RunStore, SweepPoint


def _point(nprocs: int, launch: int, group: str) -> dict:
    stats = dict(median_us=2.0, q1_us=1.0, q3_us=3.0, spread_us=2.0, min_us=1.0, max_us=3.0)
    return asdict(
        SweepPoint(
            "allreduce", "mpi", "native", "float32", "sum", "cpu", 8, 2, nprocs, 1, nprocs, **stats,
            rounds=3, iterations=1, algbw_gbs=1.0, busbw_gbs=1.0, validation="pass",
            launch=launch, group=group, round_us="1.000 2.000 3.000",
        )
    )  # fmt: skip


def _spec(run_dir, **fields):
    base = dict(nprocs=(2, 3), launches=2, groups=("mpi", "other"), shuffle=False)
    return RecordedExperiment("demo", {"x": 1}, str(run_dir), "--run-dir", **{**base, **fields})


def _launcher(ran, incomplete=(), stop_at=None):
    """A launch that writes a record as a job's rank 0 would; ``incomplete``: jobs whose
    record says so; ``stop_at``: the turn whose job fails."""

    def launch(turn):
        ran.append(turn.job)
        if turn.index == stop_at:
            return JobOutcome(5, finished=False, failures=0)
        record = {"rows": [list(turn.job)], "points": [_point(*turn.job)]}
        record["complete"] = turn.job not in incomplete
        turn.part.write_text(json.dumps(record))
        return JobOutcome(0, finished=True, failures=0)

    return launch


def test_every_launch_is_kept_with_its_points_in_order(tmp_path):
    ran = []
    found = run_recorded(_spec(tmp_path / "run"), _launcher(ran))
    expected = [(p, k, g) for k in (1, 2) for p in (2, 3) for g in ("mpi", "other")]
    assert found.code == 0 and ran == found.order == expected
    assert [r["rows"] for r in found.records] == [[list(job)] for job in expected]
    store = RunStore(tmp_path / "run")
    assert len(store.load()) == len(expected)
    assert store.read_metadata()["complete"] is True
    assert not list((tmp_path / "run").glob(".launch-*"))  # the records' files are gone


def test_a_resume_runs_only_the_launches_without_a_complete_record(tmp_path):
    ran = []
    with pytest.raises(JobFailed):
        run_recorded(_spec(tmp_path / "run"), _launcher(ran, incomplete={(3, 1, "mpi")}, stop_at=5))
    assert RunStore(tmp_path / "run").read_metadata()["complete"] is False
    with pytest.raises(UsageError, match="add --resume"):
        run_recorded(_spec(tmp_path / "run"), _launcher([]))
    with pytest.raises(UsageError, match=r"other options \(x\)"):
        spec = _spec(tmp_path / "run", resume=True)
        run_recorded(RecordedExperiment(**{**spec.__dict__, "config": {"x": 2}}), _launcher([]))
    again = []
    found = run_recorded(_spec(tmp_path / "run", resume=True), _launcher(again))
    assert again == [(3, 1, "mpi"), *found.order[4:]]
    assert len(found.records) == 8
    # the incomplete launch's points were not stored; its rerun's are
    assert len(RunStore(tmp_path / "run").load()) == 8


def test_a_sweeps_run_directory_is_not_continued(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create()
    store.append([SweepPoint(**_point(2, 1, "mpi"))])
    with pytest.raises(UsageError, match="another run's results"):
        run_recorded(_spec(tmp_path / "run", resume=True), _launcher([]))


class Killed(BaseException):
    """The process ending where it stands (no handler of the engine's runs)."""


def _kill_at(monkeypatch, where: str, turn: int = 3) -> None:
    """End the session at the ``turn``-th launch's record: before its rows are written,
    between its rows and its record, or just after its record."""
    calls = {"append": 0, "record": 0}
    append, record = RunStore.append, runinfo.record_job

    def appending(store, points):
        calls["append"] += 1
        if where == "before rows" and calls["append"] == turn:
            raise Killed
        append(store, points)

    def recording(*args, **kwargs):
        calls["record"] += 1
        if where == "between" and calls["record"] == turn:
            raise Killed
        record(*args, **kwargs)
        if where == "after record" and calls["record"] == turn:
            raise Killed

    monkeypatch.setattr(RunStore, "append", appending)
    monkeypatch.setattr(runinfo, "record_job", recording)


@pytest.mark.parametrize("where", ["before rows", "between", "after record"])
def test_a_resume_after_a_kill_at_any_moment_neither_loses_nor_repeats_rows(
    tmp_path, monkeypatch, capsys, where
):
    with monkeypatch.context() as patched:
        _kill_at(patched, where)
        with pytest.raises(Killed):
            run_recorded(_spec(tmp_path / "run"), _launcher([]))
    again = []
    found = run_recorded(_spec(tmp_path / "run", resume=True), _launcher(again))
    frame = RunStore(tmp_path / "run").load()
    stored = sorted(zip(frame["nprocs"], frame["launch"], frame["group"], strict=True))
    assert stored == sorted(found.order) and len(found.records) == 8
    # The killed launch runs again unless its record was stored.
    assert again == found.order[3 if where == "after record" else 2 :]
    assert ("removed 1 row of launches" in capsys.readouterr().err) == (where == "between")


def test_a_launchs_points_must_name_its_launch(tmp_path):
    def launch(turn):
        record = {"rows": [], "points": [_point(turn.job[0], turn.job[1] + 1, turn.job[2])]}
        turn.part.write_text(json.dumps(record))
        return JobOutcome(0, finished=True, failures=0)

    with pytest.raises(ValueError, match="a point of launch 1/mpi at p=2 says launch 2/mpi"):
        run_recorded(_spec(tmp_path / "run"), launch)


@pytest.mark.parametrize("spelling", ["./run", "run/", "{tmp}/run", "./sub/../run/"])
def test_a_resume_takes_the_same_folder_however_its_option_spells_it(
    tmp_path, monkeypatch, spelling
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()

    def spec(output, **fields):
        base = dict(nprocs=(2,), launches=2, groups=("mpi",), shuffle=False)
        config = {"x": 1, "out": output}
        return RecordedExperiment("demo", config, output, "--out", **{**base, **fields})

    with pytest.raises(JobFailed):
        run_recorded(spec("run"), _launcher([], stop_at=2))
    again = []
    given = spelling.format(tmp=tmp_path)
    found = run_recorded(spec(given, resume=True), _launcher(again))
    assert found.code == 0 and again == [(2, 2, "mpi")]
    metadata = RunStore(tmp_path / "run").read_metadata()
    assert metadata["config"]["out"] == str(tmp_path / "run")
    assert sorted(os.listdir(tmp_path)) == ["run", "sub"]


def test_a_run_directory_in_use_names_its_holders_command_and_the_option(tmp_path):
    holder = RunStore(tmp_path / "run").lock("osu-dl-bench train-bench --out run", "--out")
    with holder, pytest.raises(UsageError) as refused:
        run_recorded(_spec(tmp_path / "run"), _launcher([]))
    message = str(refused.value)
    assert f"pid {os.getpid()} on " in message
    assert ": osu-dl-bench train-bench --out run)" in message
    assert message.endswith("or choose another --run-dir") and "sweep" not in message


def test_a_job_that_ends_badly_after_its_last_point_says_so_and_the_run_keeps_its_points(
    tmp_path, capsys
):
    def launch(turn):
        record = {"rows": [list(turn.job)], "points": [_point(*turn.job)], "complete": True}
        turn.part.write_text(json.dumps(record))
        # Its 'done' event came, then a rank was killed: finished, no wrong results, exit -9.
        return JobOutcome(-9 if turn.index == 1 else 0, finished=True, failures=0)

    found = run_recorded(_spec(tmp_path / "run", nprocs=(2,), groups=("mpi",)), launch)
    err = capsys.readouterr().err
    assert found.code == 1, found.code
    assert err.count("osu-dl-bench: error:") == 1, err
    assert "measured all its points but ended with exit code -9" in err, err
    assert str(tmp_path / "run") in err and len(RunStore(tmp_path / "run").load()) == 2
