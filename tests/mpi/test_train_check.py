"""``train --check-table`` under real mpiexec, one batched launch: a table choice made slower
in training by the test hook is replaced by --adapt while --validate passes, the report's
fields, and the table of the kept choices read back by ``select``. The parts:
tests/unit/test_train_check.py."""

import importlib.util
import json
import sys

import pytest
from mpirun import REPO, mpi_env, run_cli, run_with_timeout

from osu_dl_bench.train.comm_hooks import SLOW_CANDIDATE_ENV

_MISSING = [m for m in ("torch", "sklearn") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(
    bool(_MISSING),
    reason=f"{', '.join(_MISSING)} not installed: pip install 'osu-dl-bench[train]'",
)
TIMEOUT = 400
# The cnn's gradients in 3 buckets: 131 KB (ring in the table below), 18 KB and 640 B.
SMALL_BUCKETS = ["--first-bucket", "4K", "--bucket-cap", "16K"]
RING = "ring:seg=64K"
# Far above any allreduce of these sizes on a loaded 2-core machine (~1-20 ms).
DELAY = 0.15


def _table(tmp_path):
    """A p=2 table: allreduce recursive doubling below 64 KiB, ring above; bcast chain."""
    choice = {
        "recursive_doubling": {"backend": "mpi", "algorithm": "recursive_doubling", "params": {}},
        "ring": {"backend": "mpi", "algorithm": "ring", "params": {"seg": 65536}},
        "chain": {"backend": "mpi", "algorithm": "chain", "params": {}},
    }
    ranges = {
        "allreduce": [
            {"min_bytes": 0, "max_bytes": 65536, "choice": choice["recursive_doubling"]},
            {"min_bytes": 65536, "max_bytes": None, "choice": choice["ring"]},
        ],
        "bcast": [{"min_bytes": 0, "max_bytes": None, "choice": choice["chain"]}],
    }
    entries = [
        {
            "collective": c,
            "device": "cpu",
            "nodes": 1,
            "ppn": 2,
            "nprocs": 2,
            "measured_bytes": [8, 1 << 24],
            "ranges": ranges[c],
        }
        for c in ranges
    ]
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"schema_version": 1, "entries": entries}))
    return path


@pytest.fixture(scope="module")
def adapted(tmp_path_factory):
    """One run: p = 2, --validate, --adapt, --write-table, the table's ring slowed."""
    tmp = tmp_path_factory.mktemp("check")
    summary, written = tmp / "summary.json", tmp / "trained.json"
    argv = ["train", "--steps", "36", "-b", "60", *SMALL_BUCKETS, "--validate"]
    argv += ["--table", str(_table(tmp)), "--adapt", "--write-table", str(written)]
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
    assert step["measured_exposed_ms"] is not None and check["cost"]["share_of_1000_steps"] is None
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
    argv = ["train", "--steps", "10", *SMALL_BUCKETS, "--table", str(_table(tmp_path))]
    res = run_cli(2, [*argv, "--check-table", "--progress", "off"], timeout=TIMEOUT)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "--check-table needs 2 warm-up steps and 30 check steps" in res.stderr
    assert "(--steps 32 or more)" in res.stderr
