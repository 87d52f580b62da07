"""The typed job spec: what the orchestrator writes is what the child reads, the child's
command line carries the spec's path alone, and a spec this version did not write is
refused with one message naming the field (no MPI: the spec is read before MPI starts)."""

from __future__ import annotations

import json
import sys

import pytest
from support.sweep import sweep_config

from collectives.shape import JobShape
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import job_spec, launch, orchestrate
from osu_dl_bench.jobs.job_spec import (
    CHILD_MODULE,
    MEASURE,
    PLAN,
    SpecError,
    read_spec,
    spec_path,
    write_spec,
)
from osu_dl_bench.jobs.sweep_config import BatchOptions, Launching


def _cfg(tmp_path, *argv):
    return sweep_config("--np", "2,3", "-a", "native,ring", *argv, "-o", str(tmp_path / "run"))


def _written(tmp_path, spec=None):
    """A measuring job's spec as the orchestrator writes it, as a JSON document."""
    spec = spec or orchestrate.measuring_spec(_cfg(tmp_path), (3, 2, "mpi"))
    path = write_spec(spec, tmp_path / "spec.json")
    return path, json.loads(path.read_text())


def _refusal(tmp_path, change) -> str:
    path, document = _written(tmp_path)
    change(document)
    path.write_text(json.dumps(document))
    with pytest.raises(SpecError) as caught:
        read_spec(path)
    assert str(path) in str(caught.value)
    return str(caught.value)


def test_the_child_reads_the_spec_the_orchestrator_wrote(tmp_path):
    cfg = _cfg(tmp_path, "--budget", "0.25", "--no-calibration", "--ranks-per-node", "2")
    spec = orchestrate.measuring_spec(cfg, (3, 2, "gloo"))
    assert read_spec(write_spec(spec, spec_path(cfg.output, 3, 2, "gloo"))) == spec
    assert (spec.role, spec.nprocs, spec.launch, spec.group) == (MEASURE, (3,), 2, "gloo")
    assert spec.measure == cfg.measure and spec.run_dir == str((tmp_path / "run").resolve())


def test_the_jobs_command_line_carries_the_spec_path_alone(tmp_path):
    cfg = _cfg(tmp_path)
    path = spec_path(cfg.output, 3, 1, "mpi")
    cmd = launch.job_command(cfg.launching, 3, path)
    assert cmd[cmd.index(sys.executable) :] == [sys.executable, "-m", CHILD_MODULE, str(path)]
    assert launch.planner_command(path) == [sys.executable, "-m", CHILD_MODULE, str(path)]
    assert not hasattr(cfg, "worker_argv")


def test_the_planner_gets_the_shapes_the_orchestrators_launcher_gives(tmp_path):
    cfg = _cfg(tmp_path, "--ranks-per-node", "2")
    spec = orchestrate.planner_spec(cfg)
    assert spec.role == PLAN and spec.launch is None and spec.group is None
    assert spec.shapes == (JobShape(2, 1, 2), JobShape(3, 2, 2))
    assert read_spec(write_spec(spec, tmp_path / "plan.json")) == spec


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d["spec"].pop("group"), "spec.group: missing"),
        (lambda d: d["spec"]["measure"].pop("calibrate"), "spec.measure.calibrate: missing"),
        (lambda d: d["spec"].update(colour="red"), "spec.colour: unknown field"),
        (lambda d: d["spec"].update(launches="3"), "spec.launches: expected a whole number"),
        (lambda d: d["spec"]["measure"].update(calibrate=1), "spec.measure.calibrate: expected"),
        (lambda d: d["spec"].update(nprocs=[True]), "spec.nprocs[0]: expected a whole number"),
        (lambda d: d["spec"].update(nprocs=2), "spec.nprocs: expected a list"),
        (lambda d: d["spec"].update(measure=[]), "spec.measure: expected an object"),
        (lambda d: d["spec"]["measure"].update(launch_budget=0), "launch_budget: expected a pos"),
        (lambda d: d["spec"].update(launch=4), "spec.launch: expected a launch from 1 to"),
        (lambda d: d["spec"].update(launches=10**12), "spec.launches: expected 1 to 100"),
        (lambda d: d["spec"].update(group="a;b"), "spec.group: expected a backend's name"),
        (lambda d: d["spec"].update(role="inside"), "spec.launch: expected a launch and a"),
        (lambda d: d["spec"].update(shapes=[[2, 1, 2]]), "spec.shapes[0]: expected an object"),
        (lambda d: d.update(version=job_spec.SPEC_VERSION + 1), "spec version 2); this is"),
        (lambda d: d.update(package_version="0.0.1"), 'osu-dl-bench "0.0.1"'),
        (lambda d: d.pop("format"), "not a job spec"),
    ],
)
def test_a_spec_this_version_did_not_write_is_refused_naming_the_field(tmp_path, change, said):
    assert said in _refusal(tmp_path, change)


@pytest.mark.parametrize(
    ("content", "said"), [(b"{", "not JSON"), (b"\xff", "not UTF-8"), (None, "cannot read")]
)
def test_an_unreadable_spec_is_a_usage_error(tmp_path, content, said):
    path = tmp_path / "spec.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=said):
        read_spec(path)


def test_the_hidden_job_options_are_gone_from_the_command_line(tmp_path):
    for flag in ("--launch", "--group", "--orchestrated", "--plan-only"):
        with pytest.raises(UsageError, match="unrecognized arguments|ambiguous option"):
            sweep_config("--inside", flag, "1", "-o", str(tmp_path / "run"))


def test_a_jobs_spec_carries_what_it_measures_not_how_it_is_launched_or_submitted(tmp_path):
    cfg = _cfg(tmp_path, "--launcher", "srun", "--launcher-args=-N 1", "--stall-timeout", "60")
    assert cfg.launching == Launching("srun", ("-N", "1"), None, 60.0) and cfg.batch is None
    submitted = _cfg(tmp_path, "--submit", "--nodes", "2", "--time", "30")
    assert submitted.batch == BatchOptions(nodes=2, time_limit="30")
    _, document = _written(tmp_path, orchestrate.measuring_spec(cfg, (2, 1, "mpi")))
    text = json.dumps(document)
    for word in ("launcher", "stall", "resume", "adaptive", "spread", "sbatch", "dry_run"):
        assert word not in text
