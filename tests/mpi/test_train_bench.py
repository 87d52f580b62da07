"""``osu-dl-bench train-bench`` launching its real jobs (hard timeout): the configurations
binding Gloo run in launches of their own, the MPI launches never bind Gloo (their thread
counts say so), every configuration of a launch is measured in each of its rounds, and the
table and JSON, with their intervals, land where --out says."""

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from mpirun import REPO, mpi_env, run_with_timeout

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch not installed: pip install 'osu-dl-bench[train]'",
)
TABLE = REPO / "tuning_tables" / "reference-cpu-mpich-1node.json"
TINY = ["--width", "4", "--image-size", "8", "--num-classes", "4", "-b", "4"]
GLOO = {"ddp-gloo", "gloo"}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "train"
    cmd = [sys.executable, "-m", "osu_dl_bench", "train-bench", "--np", "2", "--launches", "2"]
    cmd += ["--rounds", "2", "--steps", "1", "--warmup", "0", "--table", str(TABLE)]
    cmd += ["--out", str(out), *TINY]
    res = run_with_timeout(cmd, 420, mpi_env())
    assert res.returncode == 0, res.stderr[-3000:]
    return out, json.loads(out.with_suffix(".json").read_text()), res


def test_gloo_configurations_run_in_launches_of_their_own(measured):
    _, data, _ = measured
    groups = {(row["config"], row["group"]) for row in data["rows"]}
    assert {g for c, g in groups if c in GLOO} == {"gloo"}
    assert {g for c, g in groups if c == "native"} == {"mpi", "gloo"}
    assert {g for c, g in groups if c not in GLOO | {"native"}} == {"mpi"}
    assert {"tuned", "tuned/no-overlap", "native/no-overlap"} <= {c for c, g in groups}
    # launch 1 of both groups, then launch 2, as the recorded order says
    order = data["launch_order"]["order"]
    assert sorted(order[:2]) == ["1/gloo", "1/mpi"] and sorted(order[2:]) == ["2/gloo", "2/mpi"]
    assert [f"{x['launch']}/{x['group']}" for x in data["launches"]] == order


def test_mpi_launches_never_bind_gloo(measured):
    _, data, _ = measured
    by_group = {"mpi": [], "gloo": []}
    for launch in data["launches"]:
        by_group[launch["group"]].append(launch)
    assert not any(x["torch_distributed"] for x in by_group["mpi"])
    assert all(x["torch_distributed"] for x in by_group["gloo"])
    # Gloo's threads show in its launches' processes only
    assert max(x["process_threads"] for x in by_group["mpi"]) < min(
        x["process_threads"] for x in by_group["gloo"]
    )


def test_every_configuration_of_a_launch_is_measured_each_round(measured):
    _, data, _ = measured
    for launch in data["launches"]:
        rows = [
            r
            for r in data["rows"]
            if (r["launch"], r["group"]) == (launch["launch"], launch["group"])
        ]
        assert sorted((r["round"], r["config"]) for r in rows) == sorted(
            (i, c) for i in range(2) for c in launch["measured"]
        )


def test_the_report_gives_each_ratio_with_its_interval(measured):
    out, data, res = measured
    tuned = data["summary"]["tuned"]["vs_ddp"]
    assert tuned["low"] <= tuned["ratio"] <= tuned["high"] and tuned["launches"] == 2
    assert data["summary"]["native@gloo"]["group"] == "gloo"
    assert data["config"]["np"] == 2 and data["config"]["table"] == str(TABLE)
    text = out.with_suffix(".txt").read_text()
    assert text.splitlines()[0].startswith("# training throughput at p=2: resnet depth 10")
    best = re.compile(
        r"# best tuned configuration: tuned\S* / ddp-gloo = [\d.]+ "
        r"\(95% CI [\d.]+-(>100|[\d.]+)\) over 2 launches$"
    )
    assert best.match(text.splitlines()[-1]) and text in res.stdout + "\n"


def test_every_launch_is_kept_in_the_run_directory_and_a_resume_runs_none_again(measured):
    from osu_dl_bench.measurement.store import RunStore

    out, data, res = measured
    store = RunStore(out)
    frame = store.load()
    assert set(frame["collective"]) == {"train_step"}
    assert len(frame) == len({(r["config"], r["launch"], r["group"]) for r in data["rows"]})
    assert store.read_metadata()["complete"] is True
    again = run_with_timeout([*res.args, "--resume"], 120, mpi_env())
    assert again.returncode == 0, again.stderr[-3000:]
    assert "# launch" not in again.stdout  # every launch was kept
    assert json.loads(out.with_suffix(".json").read_text())["rows"] == data["rows"]


def test_a_stalled_launch_is_reported_within_the_stall_timeout(tmp_path):
    from osu_dl_bench.jobs import launch
    from osu_dl_bench.measurement import heartbeat

    # A real stall: rank 1 stopped (SIGSTOP) mid-launch, so rank 0 waits in an allreduce
    # that never completes and writes nothing more.
    out = tmp_path / "stall"
    stall = 60  # start-up (torch, MPI, the model) was silent for 30 s on this busy host
    cmd = [sys.executable, "-m", "osu_dl_bench", "train-bench", "--np", "2", "--launches", "1"]
    cmd += ["--rounds", "100", "--steps", "4", "--warmup", "0", "--only", "native"]
    cmd += ["--stall-timeout", str(stall), "--out", str(out), *TINY]
    proc = subprocess.Popen(
        cmd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stopped = None
    group = None  # the groups' order within a launch is drawn afresh each run
    try:
        for line in proc.stdout:
            if " round 2/100 " in line:
                group = re.search(r"launch 1/1 (\w+) round 2/100", line).group(1)
                break
        (folder,) = (out / "heartbeats").iterdir()
        stopped = heartbeat.read(folder / heartbeat.file_name(1), 1).pid
        os.kill(stopped, signal.SIGSTOP)
        since = time.monotonic()
        rest, err = proc.communicate(timeout=stall + 60)
        took = time.monotonic() - since
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
    assert proc.returncode == 1, err[-3000:]
    # The stall, then the heartbeats' sample and the stop's grace (SIGTERM cannot reach
    # the stopped rank) on a busy machine.
    assert took < stall + launch.STOP_GRACE + 60, f"reported {took:.0f} s after rank 1 stopped"
    assert group in ("mpi", "gloo"), group
    told = f"launch 1 of group {group} reported nothing for {stall} s (--stall-timeout) while "
    assert told in err, err[-3000:]
    assert f"measuring native (launch 1/1 {group} round" in err, err[-3000:]
    assert "rank 1" in err and "stopped" in err, err[-3000:]  # the heartbeats' report
    assert "continue with" in err
