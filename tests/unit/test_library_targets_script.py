"""scripts/library_targets.sh refuses a bad library or C client launch count before it
creates anything or starts a job, and never runs what an argument spells."""

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "library_targets.sh"


def _run(tmp_path, lib, **env):
    out, run = tmp_path / "out dir", tmp_path / "run dir"
    argv = ["bash", str(SCRIPT), lib, str(run)]
    environ = {**os.environ, "OUT": str(out), **env}
    res = subprocess.run(
        argv, capture_output=True, text=True, cwd=tmp_path, env=environ, timeout=60
    )
    assert res.returncode == 2, res.stderr
    assert not out.exists() and not run.exists() and not (tmp_path / "INJECTED").exists()
    return res.stderr


@pytest.mark.parametrize("count", ["0", "7", "-6", "006", "1002", "$(touch INJECTED)", "6;x"])
def test_a_client_launch_count_verify_export_refuses_is_refused_before_the_sweep(count, tmp_path):
    stderr = _run(tmp_path, "mpich", CLIENT_LAUNCHES=count)
    assert f"CLIENT_LAUNCHES: expected a multiple of 6 from 6 to 996, got '{count}'" in stderr


def test_an_unknown_library_is_refused_before_anything_is_created(tmp_path):
    assert "expected mpich or openmpi" in _run(tmp_path, "$(touch INJECTED)")


@pytest.mark.parametrize(
    "nodes, ppn", [("0", "1"), ("2", "x"), ("$(touch INJECTED)", "1"), ("", "1")]
)
def test_a_cluster_layout_that_is_no_count_is_refused_before_anything_is_created(
    nodes, ppn, tmp_path
):
    stderr = _run(tmp_path, "mpich", NODES=nodes, PPN=ppn)
    assert f"NODES and PPN: expected counts from 1 to 9999, got '{nodes}' and '{ppn}'" in stderr
