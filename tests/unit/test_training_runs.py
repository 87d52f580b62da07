"""A train-bench run directory (training steps stored as a sweep's points) read by the
commands that read sweeps: tune, plot and the model refuse it with one message, compare
gives its configurations' shift, and a sweep merged with one keeps deciding collectives."""

import pandas as pd
import pytest
from support.tuning import launch_run

from osu_dl_bench.cli import main
from osu_dl_bench.measurement.store import TRAINING_STEP, RunStore
from osu_dl_bench.selection import build_table

pytestmark = pytest.mark.usefixtures("registered")

# Configurations as train-bench names them, after the registered names they stand in for.
CONFIGS = {"ring": "tuned", "reduce_bcast": "ddp-gloo"}
STEPS = {78816: {"ring": 0.8, "reduce_bcast": 1.2}}


def _training_run(path):
    """A run of training steps: as train-bench stores them, a sweep's rows whose
    collective is TRAINING_STEP and whose algorithms are the configurations."""
    run = launch_run(path, STEPS)
    results = RunStore(run).results_path
    rows = pd.read_csv(results, keep_default_na=False)
    rows["collective"] = TRAINING_STEP
    rows["algorithm"] = [CONFIGS.get(label.split(":")[0], label) for label in rows["algorithm"]]
    rows.to_csv(results, index=False)
    return run


@pytest.mark.parametrize(
    "command",
    [["tune"], ["plot"], ["model", "accuracy"]],
    ids=["tune", "plot", "model-accuracy"],
)
def test_a_training_run_is_refused_where_collectives_are_decided(tmp_path, capsys, command):
    run = _training_run(tmp_path / "train")
    out = {"tune": "x.json", "plot": "plots"}
    extra = ["-o", str(tmp_path / out[command[0]])] if command[0] in out else []
    extra += ["--platform", "ib-hdr200"] if command[0] == "model" else []
    assert main([*command, str(run), *extra]) == 2
    err = capsys.readouterr().err
    assert f"{run}: holds train-bench's training steps, not collectives" in err
    assert "Traceback" not in err


def test_compare_gives_the_shift_of_two_training_runs(tmp_path, capsys):
    a, b = _training_run(tmp_path / "a"), _training_run(tmp_path / "b")
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# decisions: none: a run holds train-bench's training steps")
    assert f"# {a} against {b}: 3 configurations measured by both" in out
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[-3:]] == ["ddp-gloo", "native", "tuned"]
    assert all(line.split()[-2:] == ["0.0%", "0.0%"] for line in lines[-3:])
    assert main(["compare", str(a), str(b), "--table", str(tmp_path / "t.json")]) == 2
    assert "whose configurations no tuning table chooses" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--referee", str(tmp_path / "r")]) == 2
    assert "--referee" in capsys.readouterr().err


def test_a_sweep_merged_with_training_steps_is_tuned_on_its_collectives(tmp_path):
    run = launch_run(tmp_path / "sweep", {4096: {"ring": 0.5}})
    steps = RunStore(_training_run(tmp_path / "train")).results_path.read_text()
    with RunStore(run).results_path.open("a") as f:
        f.write(steps.split("\n", 1)[1])  # the rows, without the header
    frame, _ = RunStore(run).read()
    assert set(frame["collective"]) == {"allreduce", TRAINING_STEP}
    table, _ = build_table(run)
    assert {entry.key.collective for entry in table.entries} == {"allreduce"}


def test_model_fit_refuses_a_training_run_before_it_calibrates(tmp_path, capsys):
    run = _training_run(tmp_path / "train")
    assert main(["model", "fit", str(run)]) == 2
    assert f"{run}: holds train-bench's training steps" in capsys.readouterr().err
    assert not (run / "calibration.csv").exists()
