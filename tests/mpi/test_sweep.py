"""The sweep: its pure parts directly, then real mpiexec jobs through the orchestrator and
--inside (every run with a hard timeout), checked against whatever the registry holds."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mpirun import mpi_env, run_cli, run_mpi, run_with_timeout, start_cli
from support.interpreter import run_python
from support.sweep import (
    difference,
    expected_rows,
    launches_of,
    one_host_context,
    stored_rows,
)

from collectives.registry import NULL_CONTROL, is_null_control, parse_variant
from osu_dl_bench.jobs.job_spec import CHILD_MODULE, SPECS_FOLDER
from osu_dl_bench.jobs.orchestrate import follow_job
from osu_dl_bench.jobs.plan import NULL_GROUP, variants_for
from osu_dl_bench.jobs.progress import Progress, encode_event
from osu_dl_bench.measurement.schedule import (
    MIN_ROUNDS,
)
from osu_dl_bench.measurement.store import REQUIRED_FIELDS, SWEEP_FIELDS, RunStore, SweepPoint

SIZES = [8 << k for k in range(7)]  # 8 B .. 512 B
TINY = ["--budget", "0.02", "--launches", "1"]


def sweep(args: list[str], timeout: float = 300, env: dict[str, str] | None = None):
    """Run the orchestrator (``osu-dl-bench sweep``, no mpiexec around it)."""
    cmd = [sys.executable, "-m", "osu_dl_bench", "sweep", *args]
    return run_with_timeout(cmd, timeout, mpi_env(env))


def test_a_silent_job_is_stopped_and_its_point_named():
    code = (
        "import time\n"
        f"print({encode_event('measuring', collective='bcast', size_bytes=64)!r}, flush=True)\n"
        "print('# an ordinary line', flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    bar = Progress({2: 1}, stream=io.StringIO(), interactive=False)
    start = time.monotonic()
    outcome = follow_job(proc, 2, bar, stall_timeout=2.0)
    assert time.monotonic() - start < 60 and proc.poll() is not None
    assert outcome.stalled_at == "bcast 64 B" and not outcome.finished


def test_orchestrator_never_loads_mpi(tmp_path):
    code = (
        "import sys, argparse\n"
        "from osu_dl_bench.jobs import orchestrate, launch\n"
        "from osu_dl_bench.commands.sweep_cli import add_arguments, config_from_args\n"
        "p = argparse.ArgumentParser(); add_arguments(p)\n"
        f"cfg = config_from_args(p.parse_args(['--np', '2,4', '-o', {str(tmp_path)!r}]))\n"
        "launch.job_command(cfg.launching, 2, 'p2.json')\n"
        "launch.job_environment(cfg.launching, 4)\n"
        "orchestrate.planner_spec(cfg)\n"
        "orchestrate.check_run_dir(cfg)\n"
        "assert 'mpi4py.MPI' not in sys.modules, 'the orchestrator loaded MPI'\n"
    )
    run_python(code, timeout=60)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("sweep") / "run"
    args = ["--np", "2,3", "--collectives", "allreduce,bcast", "-m", "8:512", *TINY]
    res = sweep([*args, "-o", str(run_dir)], timeout=600)
    return res, run_dir


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_orchestrated_sweep_stores_every_eligible_variant(full_run):
    res, run_dir = full_run
    assert res.returncode == 0, res.stdout + res.stderr
    frame = RunStore(run_dir).load()
    assert list(frame.columns) == list(SWEEP_FIELDS)
    rows = stored_rows(frame)
    assert len(rows) == len(set(rows)), "a point was stored twice"
    expected = expected_rows([2, 3], ["allreduce", "bcast"], SIZES)
    assert set(rows) == expected, difference(set(rows), expected)
    # Chunk sizes above the message run the same code: one shm variant per point, the
    # largest chunk's name (one name across sizes).
    shm_labels = {label for _, _, label, _ in rows if label.startswith("shm:")}
    assert shm_labels == {"shm:chunk=16M"}, shm_labels
    assert set(frame["validation"]) == {"pass"}
    assert (frame["q1_us"] <= frame["median_us"]).all()
    assert (frame["median_us"] <= frame["q3_us"]).all()
    assert (frame["min_us"] <= frame["q1_us"]).all() and (frame["q3_us"] <= frame["max_us"]).all()
    assert np.allclose(frame["spread_us"], frame["q3_us"] - frame["q1_us"])
    assert (frame["median_us"] > 0).all() and (frame["rounds"] >= MIN_ROUNDS).all()
    assert (frame["nodes"] == 1).all() and (frame["ppn"] == frame["nprocs"]).all()
    assert "Traceback" not in res.stderr
    last = [ln for ln in res.stderr.splitlines() if "points" in ln][-1]
    done = re.search(r"(\d+)/(\d+) points", last)
    groups = frame.groupby("nprocs")["group"].nunique()
    # 2 collectives x 7 sizes per process count and isolation group, and any re-measurement
    assert done and done[1] == done[2] and int(done[1]) >= 14 * groups.sum(), last
    # native and its null control run beside every backend: one row per point in each
    # group but the null group's, which times the null control apart alone
    beside = frame[frame["group"] != NULL_GROUP].groupby("nprocs")["group"].nunique()
    for label in ("native", NULL_CONTROL):
        mine = frame[(frame["algorithm"] == label) & (frame["state"] != "remeasured")]
        per_point = mine.groupby(["nprocs", "collective", "size_bytes"]).size()
        assert all(count == beside[key[0]] for key, count in per_point.items()), per_point


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_launch_of_the_mpi_group_calibrates_the_model_in_place(full_run):
    _, run_dir = full_run
    calibration = pd.read_csv(run_dir / "calibration.csv")
    assert set(calibration["job"]) == {"p2-launch1", "p3-launch1"}
    assert {"exchange", "ref_copy", "ref_allreduce"} <= set(calibration["kind"])
    assert (calibration["median_s"] > 0).all()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_orchestrated_sweep_writes_metadata(full_run):
    res, run_dir = full_run
    meta = json.loads((run_dir / "metadata.json").read_text())
    for field in (
        "schema_version",
        "mpi_library",
        "mpi_version",
        "hosts",
        "nodes",
        "ppn",
        "buffer_kind",
        "package_version",
        "command",
        "date",
        "launcher",
    ):
        assert meta.get(field) not in (None, "", []), field
    assert meta["mpi_library"].startswith(("MPICH", "Open MPI"))
    assert meta["launcher"] == "mpiexec" and meta["buffer_kind"] == "cpu"
    assert meta["complete"] is True and "sweep --np 2,3" in meta["command"]
    assert set(meta["jobs"]) == {"2", "3"}
    for p in (2, 3):
        job = meta["jobs"][str(p)]
        for launch in launches_of(job):
            assert launch["nprocs"] == launch["job_size"] == p
            assert launch["points_measured"] == 14
        expected = {
            (c, v.label, v.ineligible_reason(one_host_context(p, c)))
            for c in ("allreduce", "bcast")
            for v in variants_for(c, ["all"])
            if v.ineligible_reason(one_host_context(p, c))
        }
        got = {
            (s["collective"], s["algorithm"], s["reason"])
            for launch in launches_of(job)
            for s in launch["skipped"]
        }
        assert got == expected
        for coll, label, reason in expected:  # printed once, by the job's rank 0
            name = label.partition(":")[0]
            assert res.stdout.count(f"# p={p} {coll} {name}") == 1, reason


def _backend(row: tuple) -> str:
    """The backend of an expected (p, collective, label, size) row: a null control's is
    the group it runs in (native's copy in rounds: mpi; the one apart: its own group)."""
    if is_null_control(row[2]):
        return "mpi" if row[2] == NULL_CONTROL else NULL_GROUP
    return parse_variant(row[1], row[2]).algorithm.backend


def _start_sweep(args: list[str]) -> subprocess.Popen:
    return start_cli(["sweep", *args])


def _wait_for_rows(proc: subprocess.Popen, results: Path, rows: int) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) > rows:
            return
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"no {rows} results appeared: {proc.communicate()}")


def _freeze_mid_job(proc: subprocess.Popen, run_dir: Path, points_per_job: int) -> list[int]:
    """Stop the sweep's ranks (SIGSTOP) at a moment their job has stored some of its points
    and not all, so that a kill lands while a point is left to measure whatever the load
    (a kill after a job's last point is another case: nothing is left to resume); a freeze
    that lands between two jobs is undone and tried again. Returns the frozen ranks."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        ranks = _ranks_of(run_dir)
        if len(ranks) == 2:
            for pid in ranks:
                os.kill(pid, signal.SIGSTOP)
            same = sorted(_ranks_of(run_dir)) == sorted(ranks)
            if same and _a_job_is_half_done(run_dir, points_per_job):
                return ranks
            for pid in ranks:
                os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"no job was caught with points left: {proc.communicate()}")


def _a_job_is_half_done(run_dir: Path, points_per_job: int) -> bool:
    """Whether one isolation group (one job) has stored some but not all of its points."""
    try:
        rows = RunStore(run_dir).load()
    except Exception:  # a file being written as the ranks were stopped: look again later
        return False
    if rows.empty:
        return False
    stored = rows.groupby("group")[["collective", "size_bytes"]].apply(
        lambda found: len(found.drop_duplicates())
    )
    return bool(((stored > 0) & (stored < points_per_job)).any())


def _ranks_of(run_dir: Path) -> list[int]:
    """Pids of the job processes sweeping into run_dir (from /proc, Linux): each runs
    ``python -m osu_dl_bench.jobs.child SPEC`` with its spec in run_dir."""
    pids, specs = [], str(run_dir.resolve() / SPECS_FOLDER).encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        child = CHILD_MODULE.encode() in argv and any(a.startswith(specs) for a in argv)
        if child and b"mpiexec" not in argv[0]:
            pids.append(int(cmdline.parent.name))
    return pids


def _finish(proc: subprocess.Popen, timeout: float = 120) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"sweep did not end: {proc.communicate()}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_killed_rank_loses_at_most_its_point_and_resume_completes(tmp_path):
    run_dir = tmp_path / "run"
    args = ["--np", "2", "-m", "8:4K", "--budget", "0.05", "--launches", "1", "-o", str(run_dir)]
    proc = _start_sweep(args)
    expected = expected_rows([2], ["allreduce", "bcast"], [8 << k for k in range(10)])
    ranks = _freeze_mid_job(proc, run_dir, points_per_job=20)
    os.kill(ranks[-1], signal.SIGKILL)
    os.kill(ranks[0], signal.SIGCONT)
    killed = _finish(proc)
    assert killed.returncode not in (0, 2), (killed.returncode, killed.stderr)
    assert "rerun with --resume" in killed.stderr, killed.stderr
    deadline = time.monotonic() + 10
    while _ranks_of(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _ranks_of(run_dir), "a rank survived its job"
    before = RunStore(run_dir).load()
    own = before[before["group"] == before["backend"]]
    per_point = own.groupby(["group", "collective", "size_bytes"]).size()
    for (group, coll, size), rows in per_point.items():  # only whole points were stored
        want = [r for r in expected if r[1] == coll and r[3] == size and _backend(r) == group]
        assert rows == len(want), (group, coll, size)

    again = sweep(args, timeout=120)
    assert again.returncode == 2 and "add --resume" in again.stderr

    res = sweep([*args, "--resume"], timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    after = RunStore(run_dir).load()
    rows = stored_rows(after)
    assert len(rows) == len(set(rows)), "resume measured a finished point again"
    assert set(rows) == expected, difference(set(rows), expected)
    kept = stored_rows(before)
    assert kept == rows[: len(kept)], "resume rewrote earlier results"
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert len(meta["sessions"]) == 2 and meta["complete"] is True
    resumed = [launch for launch in launches_of(meta["jobs"]["2"]) if launch.get("previous")]
    assert len(resumed) == 1 and resumed[0]["previous"][0]["points_to_measure"] == 20

    done = sweep([*args, "--resume"], timeout=120)  # nothing left: no job is started
    assert done.returncode == 0 and "0 points measured" in done.stdout
    assert len(RunStore(run_dir).load()) == len(after)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_stops_the_running_job_too_keeping_the_points(tmp_path, signum):
    run_dir = tmp_path / "run"
    proc = _start_sweep(["--np", "2", "-a", "native", "-m", "8:1M", "-o", str(run_dir)])
    _wait_for_rows(proc, run_dir / "results.csv", 1)
    proc.send_signal(signum)  # the orchestrator alone, as timeout(1) or a closed ssh would
    res = _finish(proc)
    assert res.returncode == 130, res.stdout + res.stderr
    assert "interrupted: the points measured so far are kept in" in res.stderr
    deadline = time.monotonic() + 10  # the ranks get SIGTERM; give them time to exit
    while _ranks_of(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _ranks_of(run_dir), "the job outlived its orchestrator"
    assert json.loads((run_dir / "metadata.json").read_text())["complete"] is False


def _seed_results(run_dir: Path) -> None:
    values = {f: 1 for f in REQUIRED_FIELDS} | {"collective": "allreduce", "validation": "pass"}
    store = RunStore(run_dir)
    store.create()
    store.append([SweepPoint(**values)])


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--np", "0"], "process counts must be >= 1"),
        (["--np", "100000"], "above the limit of 4096"),
        (["--np", "4000"], "on this host's"),
        (["--collectives", "allreduce,nosuch"], "unknown collective 'nosuch'"),
        (["-m", "16M:8"], "larger than maximum"),
        (["--budget", "0"], "expected seconds"),
        (["-a", ","], "no algorithm named"),
        (["--launcher", "srun"], "srun"),
        (["RESULTS"], "add --resume"),
        (["-a", "nosuch"], "unknown algorithm 'nosuch'"),
        (["-T", "float128"], "unknown datatype 'float128'"),
        (["--op", "band"], "op 'band' is not valid for float32"),
        (["-a", "ring"], "names no algorithm of bcast"),
        (["-m", "1:2"], "no size holds one float32 element"),
    ],
)
def test_bad_input_gives_one_message_and_exit_2(tmp_path, argv, message):
    run_dir = tmp_path / "run"
    if argv == ["RESULTS"]:
        _seed_results(run_dir)
        argv = []
    if argv == ["--launcher", "srun"] and any(
        (Path(d) / "srun").exists() for d in os.environ.get("PATH", "").split(os.pathsep)
    ):
        pytest.skip("srun is installed here")
    res = sweep(["--np", "2", *argv, "-o", str(run_dir)], timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr
    assert res.stderr.count("osu-dl-bench: error:") == 1 and "Traceback" not in res.stderr
    assert not (run_dir / "results.csv").exists() or argv == []


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--np", "3"], "only 2 processes in this job"),
        (["-a", "nosuch"], "unknown algorithm 'nosuch'"),
        (["--np", "0"], "process counts must be >= 1"),
    ],
)
def test_bad_input_inside_a_job_exits_2_on_every_rank(tmp_path, argv, message):
    res = run_cli(2, ["sweep", "--inside", *argv, "-o", str(tmp_path / "run")], timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr and res.stderr.count("osu-dl-bench: error:") == 1


def test_inside_sweeps_smaller_counts_on_the_first_ranks(tmp_path):
    run_dir = tmp_path / "run"
    res = run_cli(
        3,
        [
            "sweep",
            "--inside",
            "--np",
            "1,3",
            "-a",
            "native",
            "-m",
            "8:64",
            *TINY,
            "-o",
            str(run_dir),
        ],
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    frame = RunStore(run_dir).load()
    assert sorted(set(stored_rows(frame))) == sorted(
        {
            (p, c, label, s)
            for p in (1, 3)
            for c in ("allreduce", "bcast")
            for s in (8, 16, 32, 64)
            for label in ("native", NULL_CONTROL)  # the null control, beside native
        }
    )
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["launcher"] == "inside"
    assert {launch["job_size"] for launch in launches_of(meta["jobs"]["1"])} == {3}
    assert res.stdout.count("p=1 allreduce 8B") == 1  # a line per point from rank 0 only
    assert "results in" in res.stdout


GRID_DRIVER = """
import sys
from osu_dl_bench.runtime.start import init_mpi
init_mpi()
from collectives import lookup
from collectives.registry import POWER_OF_TWO, register
native = lookup("allreduce", "native").factory
register(
    "allreduce", "zz_sweep_grid", grid={"seg": (1024, 4096), "mode": ("a", "b")},
)(lambda comm, seg=1024, mode="a": native(comm))
register("allreduce", "zz_sweep_pow2", requires=(POWER_OF_TWO,))(lambda comm: native(comm))
from osu_dl_bench.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_grids_are_swept_and_ineligible_variants_skipped(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(GRID_DRIVER)
    run_dir = tmp_path / "run"
    argv = ["sweep", "--inside", "--np", "2,3", "--collectives", "allreduce", "-m", "8:16"]
    argv += ["-a", "zz_sweep_grid,zz_sweep_pow2", *TINY, "-o", str(run_dir)]
    res = run_mpi(3, [str(driver), *argv], timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    grid = {f"zz_sweep_grid:seg={s},mode={m}" for s in ("1K", "4K") for m in "ab"}
    rows = stored_rows(RunStore(run_dir).load())
    assert len(rows) == len(set(rows))
    assert set(rows) == {
        (p, "allreduce", label, size)
        for size in (8, 16)
        for p, labels in ((2, grid | {"zz_sweep_pow2"}), (3, grid))
        for label in labels
    }
    job = json.loads((run_dir / "metadata.json").read_text())["jobs"]["3"]
    skipped = job["launches"]["1/mpi"]["skipped"]
    assert skipped == [
        {
            "collective": "allreduce",
            "backend": "mpi",
            "algorithm": "zz_sweep_pow2",
            "reason": "needs a power-of-two process count",
        }
    ]
    assert res.stdout.count("zz_sweep_pow2: skipped: needs a power-of-two process count") == 1


def test_wrong_results_are_stored_reported_and_fail_the_run(tmp_path):
    run_dir = tmp_path / "run"
    res = sweep(
        ["--np", "2,3", "-a", "native", "-m", "8:32", *TINY, "-o", str(run_dir)],
        env={"OSU_DL_BENCH_INJECT_FAULT": "corrupt"},
        timeout=300,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    frame = RunStore(run_dir).load()
    first = frame[frame["state"] != "remeasured"]  # a point of an outlying state is redone
    # p = 2 and 3, two collectives, three sizes; native and its null control
    assert len(first) == 2 * 2 * 3 * 2 and set(frame["validation"]) == {"fail"}
    assert "DATA VALIDATION ERROR: p=2 allreduce (native) had 1 wrong elements" in res.stdout
    meta = json.loads((run_dir / "metadata.json").read_text())
    failures = [
        f for launch in launches_of(meta["jobs"]["3"]) for f in launch["validation_failures"]
    ]
    assert len(failures) == (frame["nprocs"] == 3).sum()


def test_dry_run_plans_without_measuring(tmp_path):
    run_dir = tmp_path / "run"
    argv = ["--np", "2,3", "-m", "8:1K", "--launches", "2", "--dry-run", "-o", str(run_dir)]
    res = sweep(argv, timeout=120)
    assert res.returncode == 0, res.stderr
    jobs = re.findall(r"# p=(\d) launch (\d) \((\w+)\): 16 of 16 points to measure", res.stdout)
    groups = {group for _, _, group in jobs}
    assert "mpi" in groups and len(jobs) == 2 * 2 * len(groups), res.stdout
    assert f"# total: {16 * len(jobs)} points to measure" in res.stdout
    assert not run_dir.exists()


def test_a_library_setting_mpich_refuses_is_named_beside_mpichs_own_message(tmp_path):
    env = {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "no_such_algorithm"}
    argv = ["--np", "2", "-a", "native", "-m", "8:8", "--collectives", "allreduce"]
    res = sweep([*argv, "-o", str(tmp_path / "run")], timeout=120, env=env)
    assert res.returncode not in (0, 2), res.stdout + res.stderr
    assert "Fatal error in internal_Init_thread" in res.stderr  # MPICH's words, kept
    assert "the planner (a one-rank job that plans the launches) ended with exit code" in (
        res.stderr
    )
    assert "sets MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=no_such_algorithm" in res.stderr
