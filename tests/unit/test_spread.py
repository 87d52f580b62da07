"""sweep --spread MINUTES: the engine starts a session's launches evenly over at least that
many minutes, waiting between them with a line that says so; Ctrl-C stops the wait as it
stops a job (jobs.orchestrate)."""

from __future__ import annotations

import pytest
from support.sweep import sweep_config

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.orchestrate import (
    Experiment,
    JobOutcome,
    launch_starts,
    run_experiment,
    spread_lines,
)
from osu_dl_bench.measurement.store import RunStore

ORDER = [(2, launch, group) for launch in (1, 2, 3) for group in ("mpi", "gloo")]


def test_the_sessions_launches_start_evenly_over_the_spread():
    todo = dict.fromkeys(ORDER, 1)
    assert launch_starts(ORDER, todo, 600.0) == {1: 0.0, 2: 300.0, 3: 600.0}
    assert launch_starts(ORDER, todo, 0.0) == {}
    # Resumed after launch 1: the two left are spread over the whole span.
    resumed = {job: int(job[1] > 1) for job in ORDER}
    assert launch_starts(ORDER, resumed, 600.0) == {2: 0.0, 3: 600.0}


class FakeClock:
    """The engine's clock, moved by its waits and by each job's seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def _experiment(tmp_path, clock, started, pause=None):
    store = RunStore(tmp_path / "run")
    store.create()

    def run(job, progress):
        started.append((job, clock.now))
        clock.now += 50.0  # each job takes 50 s
        return JobOutcome(0, finished=True, failures=0)

    todo = dict.fromkeys(ORDER, 1)
    return Experiment(
        str(store.path),
        ORDER,
        todo,
        run,
        lambda *_: None,
        progress=False,
        spread_s=600.0,
        clock=clock,
        pause=pause or clock.pause,
    )


def test_each_launch_waits_for_its_turn_and_says_so(tmp_path, capsys):
    clock, started = FakeClock(), []
    ended = run_experiment(_experiment(tmp_path, clock, started))
    assert ended.code == 0
    first = {}
    for job, at in started:
        first.setdefault(job[1], at)
    assert first == {1: 0.0, 2: 300.0, 3: 600.0}
    assert clock.waits == [200.0, 200.0]  # two jobs of 50 s ran before each wait
    err = capsys.readouterr().err
    assert "# spread: waiting 3:20 before launch 2 of 3 (--spread 10 min)" in err
    assert "Ctrl-C stops, --resume continues" in err


def test_ctrl_c_during_the_wait_stops_the_sweep_and_keeps_what_was_measured(tmp_path, capsys):
    clock, started = FakeClock(), []

    def interrupted(seconds):
        raise KeyboardInterrupt

    ended = run_experiment(_experiment(tmp_path, clock, started, pause=interrupted))
    assert ended.code == 130
    assert [job[1] for job, _ in started] == [1, 1]  # launch 2 never began
    assert "interrupted: the points measured so far are kept" in capsys.readouterr().err
    assert RunStore(tmp_path / "run").read_metadata()["complete"] is False


def test_spread_is_checked_when_the_options_are_parsed():
    cfg = sweep_config("--np", "2", "--spread", "12.5", "-o", "r")
    assert cfg.spread_minutes == 12.5
    assert cfg.batch_argv()[-2:] == ["--spread", "12.5"]
    assert sweep_config("--np", "2", "-o", "r").spread_minutes == 0.0
    for bad in ("0", "-3", "nan", "inf", "ten", "1e9", "10081"):
        with pytest.raises(UsageError, match="--spread: expected a number of minutes > 0"):
            sweep_config("--np", "2", "--spread", bad, "-o", "r")
    with pytest.raises(UsageError, match="--spread 5: needs --launches 2 or more"):
        sweep_config("--np", "2", "--launches", "1", "--spread", "5", "-o", "r")
    with pytest.raises(UsageError, match="--spread paces the launches the sweep starts"):
        sweep_config("--inside", "--spread", "5", "-o", "r")


def test_a_week_of_spread_is_accepted_and_a_dry_run_says_the_wait_between_launches():
    assert sweep_config("--np", "2", "--spread", "10080", "-o", "r").spread_minutes == 10080
    cfg = sweep_config("--np", "2", "--launches", "3", "--spread", "30", "-o", "r")
    assert spread_lines(cfg) == [
        "# spread: 3 launches started evenly over 30 min (--spread): one every 15:00, "
        "waiting where a launch ends sooner"
    ]
    assert spread_lines(sweep_config("--np", "2", "-o", "r")) == []
