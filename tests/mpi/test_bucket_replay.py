"""bench allreduce --buckets under mpiexec: one training step's gradient traffic replayed
per algorithm (tuned through a table), checked, printed once and written as records."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
from mpirun import run_cli
from support.tuning import make_entry, make_table

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (pip install 'osu-dl-bench[train]')",
)

STEPS = 3


def _rows(stdout: str) -> list[list[str]]:
    return [ln.split() for ln in stdout.splitlines() if ln and not ln.startswith("#")]


def test_resnet_step_replayed_per_algorithm_with_tuned_validated_and_recorded(tmp_path):
    from osu_dl_bench.train.traffic import bucket_plan

    plan = bucket_plan("resnet")  # the trainer's ResNet-18: three buckets
    table = make_table(make_entry(2, [(0, "native"), (16 << 20, "ring")]))
    table_path = table.write(tmp_path / "t.json")
    out = tmp_path / "replay.csv"
    argv = ["bench", "allreduce", "--buckets", "resnet", "-a", "native,ring,tuned"]
    argv += ["--table", str(table_path), "-c", "-i", str(STEPS), "-x", "1", "-o", str(out)]
    res = run_cli(2, argv, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr

    sizes = " ".join(str(b) for b in plan.bucket_bytes)
    assert res.stdout.count(f"# Buckets (bytes, in order): {sizes}") == 1
    assert f"{len(plan.bucket_bytes)} allreduces" in res.stdout
    rows = _rows(res.stdout)
    assert [r[0].split(":")[0] for r in rows] == ["native", "ring", "tuned"]
    for row in rows:
        avg, lo, hi, p50, p99 = map(float, row[1:6])
        assert 0 < lo <= avg <= hi and 0 < p50 <= p99
        assert row[-1] == "Pass"

    records = pd.read_csv(out)
    assert list(records["algorithm"].str.split(":").str[0]) == ["native", "ring", "tuned"]
    assert set(records["model"]) == {"resnet"}
    assert set(records["bucket_count"]) == {len(plan.bucket_bytes)}
    assert set(records["bucket_bytes"]) == {sizes}
    assert set(records["size_bytes"]) == {plan.total_bytes}
    assert set(records["iterations"]) == {STEPS}
    assert set(records["validation"]) == {"pass"}
    assert all(len(str(steps).split()) == STEPS for steps in records["iter_max_us"])


def test_an_unknown_model_gives_one_message_and_exit_2_everywhere():
    res = run_cli(2, ["bench", "allreduce", "--buckets", "resnet51"], timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert (res.stdout + res.stderr).count("unknown model 'resnet51': expected one of") == 1


def test_a_wrong_result_in_a_bucket_fails_the_replay_and_keeps_its_records(tmp_path):
    out = tmp_path / "replay.json"
    argv = ["bench", "allreduce", "--buckets", "cnn", "-c", "-i", "2", "-x", "1", "-o", str(out)]
    res = run_cli(2, argv, timeout=120, env={"OSU_DL_BENCH_INJECT_FAULT": "corrupt"})
    assert res.returncode == 1, res.stdout + res.stderr
    assert "DATA VALIDATION ERROR: allreduce (native) had 1 wrong elements" in res.stdout
    assert _rows(res.stdout)[0][-1] == "Fail"
    saved = pd.read_json(out, orient="records")
    assert list(saved["validation"]) == ["fail"] and list(saved["model"]) == ["cnn"]
