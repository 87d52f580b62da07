"""``osu-dl-bench train-bench`` launching its real job (hard timeout): every configuration
is measured in every round and the table and JSON land where --out says."""

import importlib.util
import json
import sys

import pytest
from mpirun import REPO, mpi_env, run_with_timeout

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch not installed: pip install 'osu-dl-bench[train]'",
)
TABLE = REPO / "tuning_tables" / "reference-cpu-mpich-1node.json"
TINY = ["--width", "4", "--image-size", "8", "--num-classes", "4", "-b", "4"]


def test_a_tiny_comparison_measures_every_configuration_each_round(tmp_path):
    out = tmp_path / "train"
    cmd = [sys.executable, "-m", "osu_dl_bench", "train-bench", "--np", "2", "--rounds", "2"]
    cmd += ["--steps", "1", "--warmup", "0", "--table", str(TABLE), "--out", str(out), *TINY]
    res = run_with_timeout(cmd, 300, mpi_env())
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    configs = list(data["summary"])
    assert {"native", "tuned", "tuned/no-overlap", "ddp-gloo"} <= set(configs)
    assert len(data["rows"]) == 2 * len(configs)
    assert data["config"]["np"] == 2 and data["config"]["table"] == str(TABLE)
    text = out.with_suffix(".txt").read_text()
    assert text.splitlines()[0].startswith("# training throughput at p=2: resnet depth 10")
    assert "# target tuned >= 1.1x ddp-gloo: " in text and text in res.stdout + "\n"
