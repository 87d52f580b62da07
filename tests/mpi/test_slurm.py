"""Slurm: SLURM_* topology parsing, the sbatch scripts and the pending-forever guard without
Slurm; then, through a real Slurm (scripts/slurm_local.sh start), a submitted sweep at
p = 2 and 4 and a 2-rank training validation, each job with a hard timeout."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from mpirun import REPO, mpi_env, run_with_timeout
from support.sweep import difference, expected_rows, launches_of, stored_rows, sweep_config

from collectives.units import doubling_sizes
from osu_dl_bench.jobs import slurm
from osu_dl_bench.measurement.store import RunStore

SBATCH_DIR = REPO / "scripts" / "sbatch"
# Seconds a job may take from submission to its end: the sweep below takes ~20 s and the
# training ~17 s on 2 idle cores; a busy machine may triple that.
JOB_TIMEOUT = 240.0
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def _cli(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "osu_dl_bench", *argv]
    return run_with_timeout(cmd, 120, mpi_env(env))


@pytest.mark.parametrize("name", ["sweep.sbatch", "train.sbatch"])
def test_templates_ask_for_a_shape_and_run_srun(name):
    text = (SBATCH_DIR / name).read_text()
    for option in ("nodes", "ntasks-per-node", "time", "partition"):
        assert re.search(rf"^#SBATCH --{option}=\S+$", text, re.M), option
    if name == "sweep.sbatch":
        assert 'osu-dl-bench sweep --launcher srun --np "$NP"' in text
    else:
        assert 'srun --mpi="$MPI" osu-dl-bench train' in text
    check = run_with_timeout(["bash", "-n", str(SBATCH_DIR / name)], 30)
    assert check.returncode == 0, check.stderr


def _script_variables(script: Path) -> dict[str, str]:
    """VENV, NP, OUT and the sweep arguments as bash sees them, without running the sweep."""
    text = script.read_text().split("\nif [[ -n $VENV ]]")[0]
    probe = text + '\neval "sweep_args=($SWEEP_ARGS)"\nprintf "%s\\n" "$VENV" "$NP" "$OUT"'
    probe += ' "${sweep_args[@]}"\n'
    res = run_with_timeout(["bash", "-c", probe], 30)
    assert res.returncode == 0, res.stderr
    venv, nprocs, out, *args = res.stdout.splitlines()
    return {"VENV": venv, "NP": nprocs, "OUT": out, "args": args}


def test_submitted_script_reruns_the_same_sweep_with_srun(tmp_path):
    run_dir = tmp_path / "run"
    argv = ["--submit", "--np", "2,6", "--nodes", "2", "--time", "20", "--partition", "p1"]
    argv += ["-m", "8:64K", "-a", "native,ring:seg=4K", "--budget", "0.5", "-o", str(run_dir)]
    argv += ["--launcher-args=--mpi=pmix --cpu-bind=none"]
    cfg = sweep_config(*argv)
    request = slurm.batch_request(cfg.nprocs, cfg.batch)
    assert (request.nodes, request.ntasks_per_node, request.ntasks) == (2, 3, 6)
    script = tmp_path / "sweep.sbatch"
    script.write_text(slurm.sweep_script(cfg, request, slurm.read_template()))
    text = script.read_text()
    for line in ("--nodes=2", "--ntasks-per-node=3", "--time=20", "--partition=p1"):
        assert f"\n#SBATCH {line}\n" in text, line
    assert f"\n#SBATCH --output={run_dir}/slurm-%j.out\n" in text
    found = _script_variables(script)
    assert found["VENV"] == slurm.current_venv() and found["NP"] == "2,6"
    assert found["OUT"] == str(run_dir)
    again = sweep_config(
        "--launcher", "srun", "--np", found["NP"], "-o", found["OUT"], *found["args"]
    )
    assert (again.nprocs, again.measure) == (cfg.nprocs, cfg.measure)
    assert again.launching == cfg.launching and again.batch is None
    assert again.launching.launcher_args == ("--mpi=pmix", "--cpu-bind=none")


def test_dry_run_writes_the_script_without_slurm(tmp_path):
    run_dir = tmp_path / "run"
    no_slurm = {"PATH": str(tmp_path / "empty")}  # sbatch and sinfo out of reach
    argv = ["sweep", "--submit", "--dry-run", "--np", "2", "-m", "8:64", "-o", str(run_dir)]
    res = _cli(argv, no_slurm)
    assert res.returncode == 0, res.stdout + res.stderr
    script = run_dir / "sweep.sbatch"
    assert f"# batch script (not submitted: --dry-run): {script}" in res.stdout
    assert "# p=2 launch 1 (mpi):" in res.stdout and script.read_text() in res.stdout
    assert not (run_dir / "results.csv").exists()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--submit", "--launcher", "mpiexec"], "expected --launcher srun or none"),
        (["--submit", "--inside"], "drop --inside"),
        (["--partition", "debug"], "--partition shapes the batch job of --submit"),
        (["--nodes", "2"], "--nodes shapes the batch job of --submit"),
        (["--submit", "--time", "1h"], "expected a Slurm time limit"),
        (["--submit"], "needs Slurm's sbatch, sinfo, scontrol"),
        (["--submit", "--partition", "a b", "--dry-run"], "cannot contain spaces"),
    ],
)
def test_bad_submit_input_gives_one_message_and_exit_2(tmp_path, argv, message):
    no_slurm = {"PATH": str(tmp_path / "empty")}
    res = _cli(["sweep", "--np", "2", *argv, "-o", str(tmp_path / "run")], no_slurm)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr and res.stderr.count("osu-dl-bench: error:") == 1
    assert "Traceback" not in res.stderr


def test_srun_inside_an_allocation_is_held_to_its_tasks(tmp_path):
    allocation = {"SLURM_JOB_ID": "5", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2"}
    argv = ["sweep", "--launcher", "srun", "--np", "2,4", "-o", str(tmp_path / "run")]
    res = _cli(argv, allocation)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--np 4: this allocation (Slurm job 5) has only 2 tasks" in res.stderr


@pytest.mark.parametrize(
    "option,value",
    [
        ("--sbatch-args", "--qos=x\ntouch {marker}"),
        ("--launcher-args", "--mpi=pmix\rtouch {marker}"),
        ("-a", "native\n$(touch {marker})"),
        ("-o", "{run}\ntouch {marker}"),
        ("--partition", "p1\x1b]0;title\x07"),
        ("-T", "float32\ttouch"),
        ("--op", "sum\x7f"),
        ("--time", "10\n"),
        ("--collectives", "allreduce\u2028touch {marker}"),
    ],
)
def test_control_characters_are_refused_before_anything_is_written(tmp_path, option, value):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    value = value.format(marker=marker, run=run)
    argv = ["sweep", "--submit", "--dry-run", "--np", "2", "-o", str(run), option, value]
    res = _cli(argv, {"PATH": str(tmp_path / "empty")})
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"osu-dl-bench: error: {option} {value!r}: control character" in res.stderr
    assert res.stderr.count("osu-dl-bench: error:") == 1 and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == [], "a refused command created files"


def _fake_commands(tmp_path: Path, names: dict[str, str]) -> Path:
    """A directory of stand-in commands, each a shell script body."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in names.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


# Values with spaces, quotes and shell syntax: legal (no control characters), and inert.
LAUNCHER_ARGS = "--export=ALL,X='a b' --label \"$(touch {m})\" ; touch {m} `touch {m}` |x"


SBATCH_ARGS = "--comment='a b' $(touch {m}) ; touch {m} `touch {m}` && rm -rf {m}"


def test_shell_syntax_in_values_reaches_the_job_as_text(tmp_path):
    marker, run = tmp_path / "pwned", tmp_path / "run"
    launcher_args = LAUNCHER_ARGS.format(m=marker)
    argv = ["sweep", "--submit", "--dry-run", "--np", "2", "-m", "8:64", "-o", str(run)]
    argv += ["-a", "native,ring:seg=4K", "--launcher-args", launcher_args]
    argv += ["--sbatch-args", SBATCH_ARGS.format(m=marker)]
    res = _cli(argv, {"PATH": str(tmp_path / "empty")})
    assert res.returncode == 0, res.stdout + res.stderr
    script = run / "sweep.sbatch"
    text = script.read_text()
    assert run_with_timeout(["bash", "-n", str(script)], 30).returncode == 0
    assert len(text.splitlines()) == len(slurm.read_template().splitlines()) + 1
    assert not any(
        line.lstrip().startswith(("touch", ";", "$(", "`")) for line in text.splitlines()
    )

    # Run the script itself, with a stand-in venv whose osu-dl-bench records its arguments.
    args_file = tmp_path / "args"
    fake = _fake_commands(tmp_path, {"osu-dl-bench": f"printf '%s\\0' \"$@\" > '{args_file}'"})
    (tmp_path / "activate").write_text(f'PATH="{fake}:$PATH"\n')
    venv_line = f"VENV={shlex.quote(slurm.current_venv())}"
    assert venv_line in text
    script.write_text(text.replace(venv_line, f"VENV={shlex.quote(str(tmp_path / 'venv'))}"))
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "activate").write_text((tmp_path / "activate").read_text())
    job = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_TASKS_PER_NODE": "2"}
    ran = run_with_timeout(["bash", str(script)], 30, {**os.environ, **job}, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert not marker.exists(), "a value was run as a command"
    got = args_file.read_bytes().split(b"\0")[:-1]
    passed = [a.decode() for a in got]
    assert f"--launcher-args={shlex.join(shlex.split(launcher_args))}" in passed
    assert passed[:6] == ["sweep", "--launcher", "srun", "--np", "2", "-o"]


def test_sbatch_gets_its_arguments_as_text_not_through_a_shell(tmp_path):
    marker, run = tmp_path / "pwned", tmp_path / "run"
    sbatch_args = SBATCH_ARGS.format(m=marker)
    calls = tmp_path / "calls"
    fake = _fake_commands(
        tmp_path,
        {
            "sbatch": f"printf '%s\\0' \"$@\" >> '{calls}'; echo 42",
            "sinfo": "echo 'debug*|n1|8'",
            "scontrol": f"printf '%s\\0' \"$@\" >> '{calls}'",
        },
    )
    argv = ["sweep", "--submit", "--np", "2", "-m", "8:64", "-o", str(run)]
    res = _cli([*argv, "--sbatch-args", sbatch_args], {"PATH": str(fake)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "submitted Slurm batch job 42" in res.stdout
    assert not marker.exists(), "a value was run as a command"
    recorded = [a.decode() for a in calls.read_bytes().split(b"\0")[:-1]]
    script = str(run.resolve() / "sweep.sbatch")
    sbatch = ["--parsable", "--hold", *shlex.split(sbatch_args), script]
    assert recorded == [*sbatch, "release", "42"]


def test_a_submission_sbatch_refuses_leaves_no_run_directory(tmp_path):
    run = tmp_path / "run"
    fake = _fake_commands(
        tmp_path,
        {
            "sbatch": "echo \"sbatch: error: unrecognized option '$3'\" >&2; exit 1",
            "sinfo": "echo 'debug*|n1|8'",
            "scontrol": "exit 0",
        },
    )
    argv = ["sweep", "--submit", "--np", "2", "-m", "8:64", "-o", str(run)]
    res = _cli([*argv, "--sbatch-args=--bogus"], {"PATH": str(fake)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "unrecognized option '--bogus'" in res.stderr and "Traceback" not in res.stderr
    assert not run.exists()


def _slurm_unavailable() -> str | None:
    """Why the Slurm tests cannot run here, or None."""
    missing = [c for c in ("sbatch", "sinfo", "scontrol", "scancel") if not shutil.which(c)]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} not on PATH): "
            "bash scripts/slurm_local.sh install && bash scripts/slurm_local.sh start"
        )
    try:
        res = run_with_timeout(["sinfo", "-h", "-o", "%T"], 30)
    except AssertionError:
        return "the Slurm controller did not answer sinfo within 30 s"
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no message"])[-1]
        return f"the Slurm controller does not answer ({last}): bash scripts/slurm_local.sh start"
    if not re.search(r"^(idle|mixed|allocated)", res.stdout, re.M):
        return f"no Slurm node takes jobs (sinfo: {res.stdout.split()})"
    return None


@pytest.fixture(scope="module")
def slurm_nodes() -> list[slurm.SlurmNode]:
    """The local Slurm's nodes; skips the test where there is none."""
    reason = _slurm_unavailable()
    if reason:
        pytest.skip(reason)
    return slurm.query_nodes()


@pytest.fixture
def submitted():
    """Job ids a test submitted, cancelled at teardown: a failed assertion between
    submission and the job's end leaves no job behind (scancel of a finished job is
    harmless)."""
    jobs: list[str] = []
    yield jobs
    for job_id in jobs:
        run_with_timeout(["scancel", job_id], 30)


def _job_fields(job_id: str) -> dict[str, str]:
    """scontrol's one-line record of a job, as KEY=VALUE pairs."""
    res = run_with_timeout(["scontrol", "show", "job", "-o", job_id], 30)
    assert res.returncode == 0, f"scontrol show job {job_id}: {res.stderr}"
    return dict(item.split("=", 1) for item in res.stdout.split() if "=" in item)


def wait_for_job(job_id: str, log: Path, timeout: float = JOB_TIMEOUT) -> dict[str, str]:
    """Poll a job until it ends; past the timeout cancel it and fail naming it."""
    deadline = time.monotonic() + timeout
    while (fields := _job_fields(job_id))["JobState"] not in FINISHED:
        if time.monotonic() > deadline:
            run_with_timeout(["scancel", job_id], 30)
            tail = log.read_text()[-3000:] if log.exists() else "(no log yet)"
            raise AssertionError(
                f"Slurm job {job_id} did not finish within {timeout:g} s (state "
                f"{fields['JobState']}, reason {fields.get('Reason')}); cancelled it\n{tail}"
            )
        time.sleep(0.5)
    return fields


def _assert_completed(fields: dict[str, str], log: Path) -> None:
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), (
        f"job {fields['JobId']} ended {fields['JobState']} {fields['ExitCode']}\n"
        + (log.read_text()[-3000:] if log.exists() else "(no log)")
    )


def test_submitted_sweep_measures_each_count_in_its_own_step(slurm_nodes, submitted, tmp_path):
    run_dir = tmp_path / "run"
    collectives, algorithms = ["allreduce", "bcast"], ["native", "ring"]
    argv = ["sweep", "--submit", "--np", "2,4", "-m", "8:64K", "--budget", "0.05"]
    argv += ["--collectives", ",".join(collectives), "-a", ",".join(algorithms)]
    argv += ["--launches", "2"]
    res = _cli([*argv, "-o", str(run_dir)])
    assert res.returncode == 0, res.stdout + res.stderr
    job_id = re.search(r"submitted Slurm batch job (\d+)", res.stdout)[1]
    submitted.append(job_id)
    log = run_dir / f"slurm-{job_id}.out"
    assert f"results: {run_dir / 'results.csv'}" in res.stdout and str(log) in res.stdout
    _assert_completed(wait_for_job(job_id, log), log)

    frame = RunStore(run_dir).load()
    want = expected_rows([2, 4], collectives, doubling_sizes(8, 64 << 10), algorithms)
    for launch in (1, 2):
        rows = stored_rows(frame[frame["launch"] == launch])
        assert len(rows) == len(set(rows)) and set(rows) == want, difference(set(rows), want)
    assert set(RunStore(run_dir).load()["validation"]) == {"pass"}
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["complete"] is True and meta["launcher"] == "srun"
    assert meta["slurm_job_id"] == job_id and meta["slurm_ntasks_per_node"] == 4
    assert meta["submissions"][0]["slurm_job_id"] == job_id
    assert meta["submissions"][0]["script"] == str(run_dir / "sweep.sbatch")
    steps = {e["slurm_step_id"] for p in ("2", "4") for e in launches_of(meta["jobs"][p])}
    for p in (2, 4):
        for job in launches_of(meta["jobs"][str(p)]):
            assert (job["slurm_job_id"], job["slurm_ntasks"], job["nprocs"]) == (job_id, p, p)
    assert len(steps) == 4, "each launch of each process count runs in a step of its own"
    assert f"results in {run_dir}" in log.read_text()


def test_more_tasks_than_cpus_are_refused_before_submission(slurm_nodes, tmp_path):
    most = max(n.cpus for n in slurm_nodes if n.default_partition)
    run_dir = tmp_path / "run"
    res = _cli(["sweep", "--submit", "--np", str(most + 1), "-m", "8", "-o", str(run_dir)])
    assert res.returncode == 2, res.stdout + res.stderr
    assert "pending forever" in res.stderr and f"at most {most} CPUs" in res.stderr
    assert not (run_dir / "sweep.sbatch").exists()


def test_srun_starts_the_mpich_ranks_and_records_carry_the_job_id(slurm_nodes, tmp_path):
    slurm.check_fits(slurm.BatchRequest(1, 2, "10", None), slurm_nodes)
    out = tmp_path / "bench.csv"
    cmd = ["srun", "-n", "2", "--mpi=pmi2", "--time=5", sys.executable, "-m", "osu_dl_bench"]
    res = run_with_timeout([*cmd, "bench", "allreduce", "-m", "8:64", "-c", "-o", str(out)], 120)
    assert res.returncode == 0, res.stdout + res.stderr
    frame = pd.read_csv(out, dtype=str)
    assert set(frame["nprocs"]) == {"2"} and set(frame["validation"]) == {"pass"}
    (job_id,) = set(frame["slurm_job_id"])
    assert job_id.isdigit() and set(frame["slurm_ntasks_per_node"]) == {"2"}


_NO_TRAIN = [m for m in ("torch", "sklearn") if importlib.util.find_spec(m) is None]


@pytest.mark.skipif(bool(_NO_TRAIN), reason=f"{', '.join(_NO_TRAIN)} not installed")
def test_training_validation_runs_under_sbatch(slurm_nodes, submitted, tmp_path):
    template = SBATCH_DIR / "train.sbatch"
    tasks = int(re.search(r"^#SBATCH --ntasks-per-node=(\d+)$", template.read_text(), re.M)[1])
    # The guard the tests share with --submit: a job that cannot fit would pend forever.
    slurm.check_fits(slurm.BatchRequest(1, tasks, "10", None), slurm_nodes)
    out, log = tmp_path / "train", tmp_path / "slurm.out"
    train_args = "--steps 12 -b 60 --validate --first-bucket 4K --bucket-cap 16K"
    env = mpi_env({"VENV": slurm.current_venv(), "OUT": str(out), "TRAIN_ARGS": train_args})
    sbatch = ["sbatch", "--parsable", f"--output={log}", "--partition", _default(slurm_nodes)]
    res = run_with_timeout([*sbatch, str(template)], 60, env)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip().split(";")[0]
    submitted.append(job_id)
    _assert_completed(wait_for_job(job_id, log), log)

    summary = json.loads((out / "summary.json").read_text())
    assert summary["nprocs"] == tasks == 2 and summary["total_steps"] == 12
    assert summary["validation"]["passed"] and summary["validation"]["max_abs_diff"] <= 1e-5
    meta = summary["metadata"]
    assert (meta["slurm_job_id"], meta["slurm_nodes"], meta["slurm_ntasks_per_node"]) == (
        job_id,
        "1",
        "2",
    )
    printed = (out / "train.txt").read_text()
    assert "validation:" in printed and "PASS" in printed and "img/s total:" in printed
    assert f"osu-dl-bench train: job {job_id}, 2 tasks" in log.read_text()
    assert shlex.join(train_args.split()) in meta["command"]


def _default(nodes: list[slurm.SlurmNode]) -> str:
    """The default partition: the template names 'debug', which a cluster may not have."""
    return next(n.partition for n in nodes if n.default_partition)
