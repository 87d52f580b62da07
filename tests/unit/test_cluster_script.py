"""scripts/cluster_local.sh's own state and options, without root: its config is read as
data (never evaluated), `down` removes only names the cluster makes, its state directory
must be the caller's own, and `up`'s options are parsed strictly (--dry-run creates
nothing). The cluster itself is tested in tests/mpi/test_cluster.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "cluster_local.sh"


def _script(state: Path, *args: str, venv: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OSU_DL_BENCH_CLUSTER_DIR": str(state), "OSU_DL_BENCH_CLUSTER_SLURM": "0"}
    if venv is not None:
        env["VENV"] = str(venv)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30
    )


def _state(tmp_path: Path, config: str, created: str = "") -> Path:
    """A state directory of the caller's own holding ``config`` and ``created``."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "config").write_text(config)
    (state / "created").write_text(created)
    return state


def _stub_venv(tmp_path: Path) -> Path:
    """A venv whose python writes the environment it was given to env.txt."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nenv > "{venv}/env.txt"\n')
    python.chmod(0o755)
    return venv


def _error(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["env", "mpiexec"])
def test_a_command_in_the_config_is_refused_not_run(tmp_path, command):
    planted = tmp_path / "planted"
    state = _state(tmp_path, f"nodes=2\nrate=1gbit; touch {planted}\n")
    res = _script(state, command, "-n", "2", "true", venv=_stub_venv(tmp_path))
    if command == "env":
        # What a user does with env's lines.
        subprocess.run(["bash", "-c", 'eval "$1"', "bash", res.stdout], timeout=30)
    assert not planted.exists()
    assert res.returncode == 1
    assert "config line 2" in _error(res) and "is not a setting up writes" in _error(res)


def test_env_quotes_and_mpiexec_exports_the_configs_values(tmp_path):
    venv = _stub_venv(tmp_path)
    state = _state(tmp_path, "nodes=2\nrate=250mbit\n")
    env = _script(state, "env")
    assert env.returncode == 0, env.stderr
    assert "export OSU_DL_BENCH_HOSTS=node1,node2\n" in env.stdout
    assert "export OSU_DL_BENCH_CLUSTER_RATE=250mbit\n" in env.stdout
    res = _script(state, "mpiexec", "-n", "2", "true", venv=venv)
    assert res.returncode == 0, res.stderr
    seen = (venv / "env.txt").read_text().splitlines()
    assert "OSU_DL_BENCH_CLUSTER_RATE=250mbit" in seen
    assert "OSU_DL_BENCH_HOSTS=node1,node2" in seen


@pytest.mark.parametrize(
    "config", ["nodes=2\nrate=1gbit\nPATH=/tmp\n", "nodes=$(id)\n", "nodes=2\nrate=1gbit\n`id`\n"]
)
def test_unknown_keys_and_bad_values_in_the_config_are_refused(tmp_path, config):
    res = _script(_state(tmp_path, config), "env")
    assert res.returncode == 1
    assert res.stdout == ""
    assert "config line" in _error(res)


def test_down_removes_only_names_the_cluster_makes(tmp_path):
    state = tmp_path / "state"
    created = [
        "link osudl-br",
        "netns osudl-node1",
        f"mount {state}/nodes/node1/uts",
        "link osudl-v1",
        "link eth0",
        "netns other",
        "mount /etc/hostname",
        f"mount {state}/../elsewhere",
        "slurm /var",
        "link osudl-v1 ; touch planted",
    ]
    _state(tmp_path, "nodes=1\nrate=1gbit\n", "\n".join(created) + "\n")
    res = _script(state, "down", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "would remove link osudl-v1",
        f"would remove mount {state}/nodes/node1/uts",
        "would remove netns osudl-node1",
        "would remove link osudl-br",
    ]
    left_alone = [line for line in res.stderr.splitlines() if "left alone" in line]
    assert len(left_alone) == 6
    assert any("eth0" in line for line in left_alone)


def test_a_state_directory_that_is_a_link_is_refused(tmp_path):
    target = tmp_path / "theirs"
    target.mkdir(mode=0o700)
    (target / "config").write_text("nodes=2\nrate=1gbit\n")
    state = tmp_path / "state"
    state.symlink_to(target)
    for args in (["env"], ["down", "--dry-run"], ["status"]):
        res = _script(state, *args)
        assert res.returncode == 1
        assert "is a symbolic link" in _error(res)


def test_a_state_directory_others_may_write_is_refused(tmp_path):
    state = _state(tmp_path, "nodes=2\nrate=1gbit\n")
    state.chmod(0o777)
    res = _script(state, "env")
    assert res.returncode == 1
    assert "writable by others (mode 777)" in _error(res)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_state_directory_of_another_user_is_refused(tmp_path):
    state = _state(tmp_path, "nodes=2\nrate=1gbit\n")
    os.chown(state, 65534, 65534)
    res = _script(state, "env")
    assert res.returncode == 1
    assert "belongs to uid 65534, not to you" in _error(res)


@pytest.mark.parametrize(
    ("args", "config"),
    [
        (["--nodes", "2", "--slow", "node02=1mbit"], "nodes=2\nrate=1gbit\nslow_node2=1mbit\n"),
        (["--nodes", "3", "--rate", "10mbit"], "nodes=3\nrate=10mbit\n"),
    ],
)
def test_up_dry_run_prints_the_config_and_creates_nothing(tmp_path, args, config):
    state = tmp_path / "state"
    res = _script(state, "up", "--dry-run", *args)
    assert res.returncode == 0, res.stderr
    assert res.stdout == config
    assert not state.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes"], "--nodes needs a value"),
        (["--nodes", "2", "--rate"], "--rate needs a value"),
        (["--slow"], "--slow needs a value"),
        (["--nodes", "2", "--slow", "node08=1mbit"], "no such node (the nodes are node1..node2)"),
        (["--nodes", "2", "--slow", "node0=1mbit"], "no such node"),
        (["--nodes", "2", "--slow", "node" + "9" * 30 + "=1mbit"], "no such node"),
        (["--nodes", "2", "--slow", "node1=fast"], "expected tc's form"),
    ],
)
def test_up_refuses_careless_options_with_one_message(tmp_path, args, message):
    res = _script(tmp_path / "state", "up", "--dry-run", *args)
    assert res.returncode == 1
    assert message in _error(res)


def test_usage_shows_the_whole_header_down_to_its_last_variable(tmp_path):
    res = _script(tmp_path / "state", "nonsense")
    assert res.returncode == 2
    assert "up [--nodes N]" in res.stderr and res.stderr.rstrip().endswith("(default REPO/.venv)")
