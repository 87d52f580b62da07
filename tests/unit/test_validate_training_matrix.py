"""scripts/validate_training_matrix.py's orchestrator, without MPI: where each p's job is
told to write its rows."""

from __future__ import annotations

from pathlib import Path

from support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


def test_a_relative_run_dir_is_resolved_before_the_jobs_change_directory(tmp_path, monkeypatch):
    script = load_script("validate_training_matrix")
    told = []

    def launch(nprocs, plan_path, out, timeout):
        told.append(out)
        return "not launched in this test"

    monkeypatch.setattr(script, "_launch", launch)
    monkeypatch.chdir(tmp_path)
    script.main(["--nprocs", "2", "--run-dir", "vm1"])
    # The jobs run with cwd=REPO: only an absolute path reaches the folder the user named.
    assert told == [tmp_path / "vm1" / "p2"]
    assert (tmp_path / "vm1" / "p2").is_dir()
    assert not (REPO / "vm1").exists()
