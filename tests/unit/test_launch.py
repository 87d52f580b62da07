"""The job launcher's pure parts (command lines for mpiexec and srun, a job's environment)
and its start/follow/stop/run on plain Python processes (no MPI job: tests/mpi has that)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.options import command_config

from collectives.shape import JobShape
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import launch, orchestrate
from osu_dl_bench.runtime.launcher import OVERSUBSCRIBED_CVARS

CORES = os.cpu_count() or 1


@pytest.fixture
def launchers(monkeypatch):
    """mpiexec and srun found at fixed paths."""
    paths = {"mpiexec": "/opt/mpi/bin/mpiexec", "srun": "/usr/bin/srun"}
    monkeypatch.setattr(launch.shutil, "which", lambda name, path=None: paths.get(name))
    return paths


def _sweep_config(*argv: str):
    return command_config("sweep", *argv, "-o", "run")


def test_mpiexec_command_runs_this_python_with_its_arguments(launchers):
    cmd = launch.mpi_command(3, ["-m", "pkg", "x"], launcher_args=["-bind-to", "core"])
    assert cmd == [
        launchers["mpiexec"],
        *["-n", "3", "-bind-to", "core"],
        *[sys.executable, "-m", "pkg", "x"],
    ]


def test_srun_command_asks_for_pmi2_before_the_users_options(launchers):
    cmd = launch.mpi_command(4, ["-c", "pass"], "srun", ["--mpi=pmix", "-N", "2"])
    assert cmd == [
        launchers["srun"],
        *["-n", "4", "--mpi=pmi2", "--mpi=pmix", "-N", "2"],  # the later --mpi wins
        *[sys.executable, "-c", "pass"],
    ]


def test_a_missing_or_unknown_launcher_is_a_usage_error(monkeypatch):
    monkeypatch.setattr(launch.shutil, "which", lambda name, path=None: None)
    with pytest.raises(UsageError, match="srun is not on PATH"):
        launch.mpi_command(2, [], "srun")
    with pytest.raises(UsageError, match="no mpiexec next to this Python"):
        launch.mpi_command(2, [])
    with pytest.raises(UsageError, match="expected one of mpiexec, srun"):
        launch.mpi_command(2, [], "mpirun")


def test_oversubscribed_jobs_get_the_no_busy_poll_settings_unless_set(monkeypatch):
    for name in OVERSUBSCRIBED_CVARS:
        monkeypatch.delenv(name, raising=False)
    chosen = next(iter(OVERSUBSCRIBED_CVARS))
    monkeypatch.setenv(chosen, "auto")
    env = launch.mpi_environment(CORES + 1)
    assert env[chosen] == "auto"  # the user's choice stays
    assert all(env[k] == v for k, v in OVERSUBSCRIBED_CVARS.items() if k != chosen)
    fitting = launch.mpi_environment(CORES)
    assert not set(OVERSUBSCRIBED_CVARS) - {chosen} & set(fitting)


def test_extra_variables_come_last_and_the_rest_is_this_process_environment(monkeypatch):
    monkeypatch.setenv("OSU_DL_BENCH_TEST_VAR", "mine")
    env = launch.mpi_environment(None, {"OSU_DL_BENCH_TEST_VAR": "job", "X_NEW": "1"})
    assert env["OSU_DL_BENCH_TEST_VAR"] == "job" and env["X_NEW"] == "1"
    assert env["PATH"] == os.environ["PATH"]
    assert os.environ["OSU_DL_BENCH_TEST_VAR"] == "mine"  # a copy, not this process's


def test_the_sweep_job_is_the_inside_sweep_of_one_count_under_the_chosen_launcher(launchers):
    cfg = _sweep_config("--np", "2,3", "--launcher", "srun", "--launcher-args=-N 1")
    cmd = launch.job_command(cfg.launching, 3, "p3.json")
    assert cmd[:6] == [launchers["srun"], "-n", "3", "--mpi=pmi2", "-N", "1"]
    assert cmd[6:] == [sys.executable, "-m", "osu_dl_bench.jobs.child", "p3.json"]
    assert orchestrate.planner_spec(cfg).nprocs == (2, 3)


def test_the_sweep_job_environment_counts_the_ranks_on_this_host(monkeypatch):
    for name in OVERSUBSCRIBED_CVARS:
        monkeypatch.delenv(name, raising=False)
    many = CORES * 4
    local = launch.job_environment(_sweep_config("--np", str(many)).launching, many)
    assert set(OVERSUBSCRIBED_CVARS) <= set(local)
    # srun on emulated nodes of one rank each: one rank per host, never oversubscribed
    spread = _sweep_config("--np", str(many), "--launcher", "srun", "--ranks-per-node", "1")
    env = launch.job_environment(spread.launching, many, spread.measure.emulated_ppn)
    assert not set(OVERSUBSCRIBED_CVARS) & set(env)


def test_a_sweep_jobs_gloo_rendezvous_gives_up_within_its_stall_timeout():
    from collectives.backends.rendezvous import RENDEZVOUS_TIMEOUT_VARIABLE

    env = launch.job_environment(_sweep_config("--np", "2", "--stall-timeout", "60").launching, 2)
    # TCPStore tries a timed-out connect once more: a quarter leaves room for both.
    assert float(env[RENDEZVOUS_TIMEOUT_VARIABLE]) == 15


# --- start, follow, stop, run on plain processes ------------------------------------------

# Prints its pid and a child's, then sleeps: the child stands for a rank.
PARENT_AND_CHILD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def _live(pid: int) -> bool:
    """Whether pid is a process that has not ended (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while _live(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _live(pid)


def test_a_silent_job_is_stopped_with_everything_it_started():
    proc = launch.start([sys.executable, "-c", PARENT_AND_CHILD])
    lines: list[str] = []
    start = time.monotonic()
    ended = launch.follow(proc, 3.0, lines.append)
    assert ended == launch.Ended(-signal.SIGTERM, stalled=True)
    assert 3.0 <= time.monotonic() - start < 30
    [child] = [int(line) for line in lines]
    assert _gone(child), "a process the job started outlived it"


def test_a_job_that_ends_is_followed_to_its_exit_code():
    code = "print('a'); print('b'); raise SystemExit(3)"
    proc = launch.start([sys.executable, "-c", code])
    lines: list[str] = []
    assert launch.follow(proc, 30.0, lines.append) == launch.Ended(3)
    assert lines == ["a\n", "b\n"]


def test_an_error_while_following_stops_the_job_and_propagates():
    proc = launch.start(
        [sys.executable, "-c", "print('x', flush=True); import time; time.sleep(600)"]
    )

    def refuse(line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launch.follow(proc, 30.0, refuse)
    assert proc.returncode == -signal.SIGTERM


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_planning_ends_with_130_one_line_and_the_planner_stopped(
    tmp_path, monkeypatch, capsys, signum
):
    started = tmp_path / "child"
    planner = PARENT_AND_CHILD.replace(
        "print(child.pid, flush=True)", f"open({str(started)!r}, 'w').write(str(child.pid))"
    )
    monkeypatch.setattr(orchestrate, "planner_command", lambda _: [sys.executable, "-c", planner])
    monkeypatch.setattr(orchestrate, "job_environment", lambda *args: dict(os.environ))

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 30
        while not (started.exists() and started.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signum)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    with pytest.raises(orchestrate.JobFailed) as failed:
        orchestrate.run_planner(_sweep_config("--np", "2"))
    assert failed.value.code == 130
    err = capsys.readouterr().err
    assert err.strip() == "interrupted while planning the launches: nothing was measured"
    assert _gone(int(started.read_text())), "the planner's child outlived the interrupt"


def test_a_stalled_job_is_looked_at_while_alive_and_stopped_even_if_looking_fails():
    proc = launch.start(
        [sys.executable, "-c", "print('x', flush=True); import time; time.sleep(600)"]
    )
    seen = []

    def look() -> None:
        seen.append(proc.poll())
        raise RuntimeError("cannot read the heartbeats")

    with pytest.raises(RuntimeError):
        launch.follow(proc, 1.0, lambda line: None, look)
    assert seen == [None] and proc.returncode == -signal.SIGTERM


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace():
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = launch.start([sys.executable, "-c", code])
    assert proc.stdout.readline() == "ready\n"
    start = time.monotonic()
    assert launch.stop(proc, grace=1.0) == -signal.SIGKILL
    assert 1.0 <= time.monotonic() - start < 20


def test_run_keeps_the_output_and_past_its_timeout_stops_the_whole_job():
    done = launch.run([sys.executable, "-c", "import sys; print('out'); sys.exit(4)"], 30)
    assert (done.returncode, done.stdout) == (4, "out\n")
    with pytest.raises(subprocess.TimeoutExpired) as hung:
        launch.run([sys.executable, "-c", PARENT_AND_CHILD], 3.0)
    assert hung.value.timeout == 3.0
    child = int(hung.value.output)
    assert _gone(child), "a process the job started outlived its timeout"


def test_stop_reaches_a_process_that_leads_no_group():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    # Signalled alone: were this test's own process group signalled, pytest would die.
    assert launch.stop(proc, grace=5.0) == -signal.SIGTERM


@pytest.fixture
def two_host_agent(monkeypatch, tmp_path):
    """OSU_DL_BENCH_HOSTS naming two nodes and an executable launch agent, as
    cluster_local.sh's env sets them; the agent's path."""
    agent = tmp_path / "agent"
    agent.write_text("#!/bin/sh\n")
    agent.chmod(0o755)
    monkeypatch.setenv(launch.HOSTS_VARIABLE, "node1,node2")
    monkeypatch.setenv(launch.AGENT_VARIABLE, str(agent))
    monkeypatch.setenv(launch.ADDRESS_VARIABLE, "10.0.0.254")
    return str(agent)


def test_mpiexec_spreads_ranks_over_the_named_hosts_in_blocks(launchers, two_host_agent):
    cmd = launch.launcher_prefix(4)
    assert cmd == [
        launchers["mpiexec"],
        *["-n", "4", "-hosts", "node1,node2", "-launcher", "ssh", "-launcher-exec", two_host_agent],
        *["-localhost", "10.0.0.254", "-ppn", "2"],
    ]


def test_open_mpi_places_ppn_ranks_on_each_host_with_its_ssh_agent(two_host_agent, monkeypatch):
    remote = launch.remote_hosts()
    assert remote is not None and remote.ranks_per_node(3) == 2
    args = launch.remote_arguments(remote, "openmpi", 2)
    assert args == [
        *["--host", "node1:2,node2:2", "--map-by", "ppr:2:node"],
        *["--prtemca", "plm_ssh_agent", two_host_agent],
    ]


def test_srun_ignores_the_hosts_and_hosts_without_an_agent_are_a_usage_error(
    launchers, two_host_agent, monkeypatch, tmp_path
):
    assert launch.launcher_prefix(2, "srun") == [launchers["srun"], "-n", "2", "--mpi=pmi2"]
    # Open MPI 5 speaks PMIx only.
    pmix = launch.launcher_prefix(2, "srun", mpi="openmpi")
    assert pmix == [launchers["srun"], "-n", "2", "--mpi=pmix"]
    monkeypatch.setenv(launch.AGENT_VARIABLE, str(tmp_path / "missing" / "agent"))
    with pytest.raises(UsageError, match="OSU_DL_BENCH_LAUNCH_AGENT"):
        launch.launcher_prefix(2)
    monkeypatch.delenv(launch.HOSTS_VARIABLE)
    assert launch.remote_hosts() is None


def test_a_sweep_plans_the_shape_the_named_hosts_give(two_host_agent):
    cfg = _sweep_config("--np", "4")
    assert launch.expected_shape(cfg.launching, 4, None) == JobShape(4, 2, 2)
    assert launch.expected_shape(cfg.launching, 3, None) == JobShape(3, 2, 2)
    assert launch.expected_shape(cfg.launching, 4, 4) == JobShape(4, 1, 4)


def test_ctrl_c_anywhere_in_a_command_ends_with_130_and_one_line_no_traceback(capsys):
    from osu_dl_bench.runtime.guard import run_guarded

    def body() -> int:
        raise KeyboardInterrupt  # as while importing pandas, the first second of a sweep

    assert run_guarded(body) == 130
    captured = capsys.readouterr()
    assert captured.err.strip() == "osu-dl-bench: interrupted" and captured.out == ""


def test_open_mpi_asked_for_where_only_another_library_s_mpiexec_is_one_message(
    monkeypatch, tmp_path
):
    monkeypatch.delenv(launch.PREFIX_VARIABLES["openmpi"], raising=False)
    monkeypatch.delenv(launch.HOSTS_VARIABLE, raising=False)
    other = tmp_path / "mpich" / "bin"
    other.mkdir(parents=True)
    (other / "mpiexec").write_text("")
    monkeypatch.setattr(launch, "find_mpiexec", lambda: str(other / "mpiexec"))
    with pytest.raises(UsageError, match="--mpi openmpi: .* is not Open MPI's"):
        launch.launcher_prefix(2, mpi="openmpi")
    assert launch.launcher_prefix(2)[0] == str(other / "mpiexec")  # its own library: fine
    ompi = tmp_path / "ompi"
    (ompi / "bin").mkdir(parents=True)
    for name in ("mpiexec", "ompi_info"):
        (ompi / "bin" / name).write_text("")
    monkeypatch.setenv(launch.PREFIX_VARIABLES["openmpi"], str(ompi))
    assert launch.launcher_prefix(2, mpi="openmpi")[:4] == [
        str(ompi / "bin" / "mpiexec"),
        "-n",
        "2",
        "--oversubscribe",
    ]
