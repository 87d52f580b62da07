"""The experiment engine's launch records (jobs/experiment.py) without a job: each launch's
record kept in the run directory as its job ends, its collective points in results.csv, a
resume that runs only the launches without a complete record, and the options a resume
must repeat."""

import json
from dataclasses import asdict

import pytest

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.experiment import RecordedExperiment, run_recorded
from osu_dl_bench.jobs.orchestrate import JobFailed, JobOutcome
from osu_dl_bench.measurement.store import RunStore, SweepPoint


def _point(launch: int, group: str) -> dict:
    stats = dict(median_us=2.0, q1_us=1.0, q3_us=3.0, spread_us=2.0, min_us=1.0, max_us=3.0)
    return asdict(
        SweepPoint(
            "allreduce", "mpi", "native", "float32", "sum", "cpu", 8, 2, 2, 1, 2, **stats,
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
        record = {"rows": [list(turn.job)], "points": [_point(turn.job[1], turn.job[2])]}
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
    store.append([SweepPoint(**_point(1, "mpi"))])
    with pytest.raises(UsageError, match="another run's results"):
        run_recorded(_spec(tmp_path / "run", resume=True), _launcher([]))
