"""Hostile launches under mpiexec: a launched job's spec that is out of range or names a
group the sweep lacks is refused on every rank with one message, and a hostile per-round
cell is measured again by --resume (two launches of two ranks, hard timeouts)."""

from __future__ import annotations

import csv
import json

from mpirun import run_cli, run_mpi
from support.sweep import sweep_config

from osu_dl_bench.jobs.job_spec import child_argv, write_spec
from osu_dl_bench.jobs.orchestrate import measuring_spec
from osu_dl_bench.measurement.store import RunStore, round_values

POINT = ["--collectives", "allreduce", "-a", "native,ring", "-m", "8:8", "--budget", "0.1"]


def _spec_file(tmp_path, job, *argv, **changes):
    """A launched job's spec as the orchestrator writes it, with ``changes`` to its fields."""
    cfg = sweep_config("--np", str(job[0]), *argv, "-o", str(tmp_path / "run"))
    path = write_spec(measuring_spec(cfg, job), tmp_path / "spec.json")
    document = json.loads(path.read_text())
    document["spec"].update(changes)
    path.write_text(json.dumps(document))
    return path


def test_a_launch_past_launches_is_refused_on_every_rank(tmp_path):
    res = run_mpi(2, child_argv(_spec_file(tmp_path, (2, 1, "mpi"), launch=4)), timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("spec.launch: expected a launch from 1 to launches (3)") == 1
    assert "Traceback" not in res.stdout + res.stderr
    assert not (tmp_path / "run" / "results.csv").exists()


def test_a_spec_with_an_unknown_field_is_refused_on_every_rank(tmp_path):
    res = run_mpi(2, child_argv(_spec_file(tmp_path, (2, 1, "mpi"), extra=1)), timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("spec.extra: unknown field") == 1
    assert "Traceback" not in res.stdout + res.stderr


def test_resume_measures_a_row_with_a_hostile_cell_again(tmp_path):
    run = tmp_path / "run"
    argv = ["sweep", "--inside", *POINT, "--launches", "1", "-o", str(run)]
    first = run_cli(2, argv, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    path = run / "results.csv"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows[-1]["round_us"] = "nan"  # the last candidate's rounds, spoilt by hand
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    again = run_cli(2, [*argv, "--resume"], timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "round_us holds 'nan', expected a positive finite time" in again.stderr
    frame, notes = RunStore(run).read()
    assert len(notes) == 1  # the spoilt row, still in the file, still dropped
    last = frame[frame["algorithm"] == rows[-1]["algorithm"]]
    assert len(last) == 1 and round_values(last["round_us"].iloc[0]).size > 0


def test_a_group_this_sweep_does_not_have_is_refused_also_by_the_waiting_rank(tmp_path):
    # Rank 2 waits while ranks 0 and 1 sweep --np 2: it must hear the refusal, not hang.
    spec = _spec_file(tmp_path, (2, 1, "nccl"), *POINT)
    res = run_mpi(3, child_argv(spec), timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("group nccl: expected one of this sweep's groups (mpi") == 1
    assert "Traceback" not in res.stdout + res.stderr
