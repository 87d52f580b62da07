"""``train --check-table`` under real mpiexec, one batched launch: a table choice made slower
in training by the test hook is replaced by --adapt while --validate passes, the report's
fields, and the table of the kept choices read back by ``select``. The parts:
tests/unit/test_train_check.py."""

import contextlib
import json
import os
import sys

import pytest
from mpirun import REPO, mpi_env, run_cli, run_with_timeout
from support.training import SMALL_BUCKETS, needs_train_extras
from support.tuning import p2_train_table

from osu_dl_bench.train.comm_hooks import SLOW_CANDIDATE_ENV

pytestmark = needs_train_extras
TIMEOUT = 400
RING = "ring:seg=64K"
# Far above any allreduce of these sizes on a loaded 2-core machine (~1-20 ms).
DELAY = 0.15


@pytest.fixture(scope="module")
def adapted(tmp_path_factory):
    """One run: p = 2, --validate, --adapt, --write-table, the table's ring slowed."""
    tmp = tmp_path_factory.mktemp("check")
    summary, written = tmp / "summary.json", tmp / "trained.json"
    argv = ["train", "--steps", "62", "-b", "60", *SMALL_BUCKETS, "--validate"]
    argv += ["--table", str(p2_train_table(tmp)), "--adapt", "--write-table", str(written)]
    env = {SLOW_CANDIDATE_ENV: f"{RING}:{DELAY}"}
    argv += ["--json", str(summary), "--progress", "off"]
    res = run_cli(2, argv, timeout=TIMEOUT, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res, json.loads(summary.read_text()), written


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_adapt_replaces_a_choice_made_slower_in_training_and_validation_passes(adapted):
    res, summary, _ = adapted
    assert summary["validation"]["passed"]
    check = summary["check"]
    by_size = {v["nbytes"]: v for v in check["sizes"]}
    ring = by_size[133928]  # the fc bucket as float32 (--validate trains it in float64)
    assert ring["table_choice"] == RING and not ring["holds"] and ring["kept"] != RING
    slowed = next(c for c in ring["candidates"] if c["label"] == RING)
    assert slowed["measured_us"] >= DELAY * 1e6 and slowed["ratio_low"] > 1.05
    moved = {m["nbytes"]: (m["from"], m["to"]) for m in check["switched"]}
    assert check["adapted"] and moved[133928] == (RING, ring["kept"])
    bucket = summary["buckets"][0]
    assert bucket["algorithm"] == ring["kept"] and bucket["how"] == "adapted"
    assert f"{RING} -> {ring['kept']}" in res.stdout and "does not hold" in res.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_report_gives_every_candidate_its_times_ratio_and_calls(adapted):
    res, summary, _ = adapted
    check = summary["check"]
    assert check["steps"] == 30 and check["first_step"] == 2
    for verdict in check["sizes"]:
        labels = [c["label"] for c in verdict["candidates"]]
        assert labels[:3] == [verdict["table_choice"], "native", "native:null"]
        for c in verdict["candidates"]:
            assert c["calls"] == 10 * len(verdict["buckets"])
            assert c["low_us"] <= c["measured_us"] <= c["high_us"]
            assert c["ratio_low"] <= c["ratio"] <= c["ratio_high"]
            assert c["predicted_us"] is None  # the table records no sweep
        assert verdict["null_ratio"] > 0 and isinstance(verdict["null_chosen"], bool)
    step = check["step"]
    assert step["measured_comm_ms"] > step["kept_comm_ms"] > 0
    cost = check["cost"]  # 30 plain steps after the check: its cost, paired step by step
    assert step["measured_exposed_ms"] is not None and cost["after_seconds"] > 0
    assert cost["share_low"] <= cost["share_of_1000_steps"] <= cost["share_high"]
    assert "of 1,000 plain steps" in res.stdout and "[95% CI " in res.stdout
    assert "# table check in training: steps 2..32" in res.stdout
    assert "predictions: none: the table's sweep (not recorded) is not here" in res.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_written_table_holds_the_kept_choices_for_select(adapted):
    _, summary, written = adapted
    table = json.loads(written.read_text())
    provenance = table["provenance"]["measured_in_training"]
    assert provenance["model"] == "cnn" and provenance["check_steps"] == [2, 32]
    assert (provenance["nprocs"], provenance["nodes"], provenance["ppn"]) == (2, 1, 2)
    kept = {v["nbytes"]: v["kept"] for v in summary["check"]["sizes"]}
    cmd = [sys.executable, "-m", "osu_dl_bench", "select", "--table", str(written), "--np", "2"]
    cmd += ["--collective", "allreduce", "--size", ",".join(map(str, sorted(kept)))]
    res = run_with_timeout(cmd, 120, mpi_env(), cwd=REPO)
    assert res.returncode == 0, res.stderr
    picks = [
        line.split("=> ")[1].split(" (")[0] for line in res.stdout.splitlines() if "=> " in line
    ]
    assert picks == [kept[size] for size in sorted(kept)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_too_short_for_the_check_is_refused_on_every_rank(tmp_path):
    argv = ["train", "--steps", "10", *SMALL_BUCKETS, "--table", str(p2_train_table(tmp_path))]
    res = run_cli(2, [*argv, "--check-table", "--progress", "off"], timeout=TIMEOUT)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "--check-table needs 2 warm-up steps and 30 check steps" in res.stderr
    assert "(--steps 32 or more)" in res.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_slow_candidate_hook_naming_no_candidate_is_refused_on_every_rank(tmp_path):
    argv = ["train", "--steps", "36", *SMALL_BUCKETS, "--table", str(p2_train_table(tmp_path))]
    argv += ["--validate", "--check-table", "--progress", "off"]
    res = run_cli(2, argv, timeout=TIMEOUT, env={SLOW_CANDIDATE_ENV: "tree:0.1"})
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert ": tree:seg=256K,trees=1 is none of the check's candidates (ring" in res.stderr
    assert "# table check" not in res.stdout


def _full_directory(tmp_path):
    """A directory on a full file system: a 64 KiB tmpfs, filled (root only), else None."""
    full = tmp_path / "full"
    full.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)]
    if os.geteuid() != 0 or run_with_timeout(mount, 30, mpi_env()).returncode != 0:
        return None
    with contextlib.suppress(OSError), open(full / "fill", "wb") as fill:
        fill.write(b"\0" * 65536)
    return full


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_table_that_cannot_be_written_keeps_the_summary_and_fails_every_rank(tmp_path):
    full = _full_directory(tmp_path)
    if full is None:
        pytest.skip("a full file system needs root to mount a tmpfs")
    try:
        summary = tmp_path / "summary.json"
        argv = ["train", "--steps", "34", *SMALL_BUCKETS, "--table", str(p2_train_table(tmp_path))]
        argv += ["--check-table", "--write-table", str(full / "t.json"), "--progress", "off"]
        res = run_cli(2, [*argv, "--json", str(summary)], timeout=TIMEOUT)
    finally:
        run_with_timeout(["umount", str(full)], 30, mpi_env())
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"--write-table {full / 't.json'}: not written: No space left" in res.stderr
    assert "Traceback" not in res.stderr and "# table check in training" in res.stdout
    assert json.loads(summary.read_text())["check"]["sizes"]
