"""scripts/check_table_p2.sh refuses a bad RUNS before it creates anything or starts a job,
and never runs what an argument spells."""

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_table_p2.sh"


@pytest.mark.parametrize("runs", ["0", "-1", "2.5", "$(touch INJECTED)", "1; touch INJECTED"])
def test_a_bad_runs_count_is_one_message_before_anything_starts(runs, tmp_path):
    out = tmp_path / "out dir"
    argv = ["bash", str(SCRIPT), str(tmp_path / "t.json"), str(out), runs]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert res.returncode == 2, res.stderr
    assert f"RUNS: expected a whole number of pairs from 1 to 999, got '{runs}'" in res.stderr
    assert not out.exists() and not (tmp_path / "INJECTED").exists()
