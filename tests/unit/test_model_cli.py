"""The model actions' options (commands.model_cli): each action parsed once into its
own frozen config, its pure checks made when the options are parsed; and the calibration
job's options."""

from __future__ import annotations

import dataclasses

import pytest

from collectives.shape import JobShape
from osu_dl_bench.cli import build_parser
from osu_dl_bench.commands.model import (
    AccuracyConfig,
    FitConfig,
    PlatformChoice,
    PredictConfig,
    TrainModelConfig,
)
from osu_dl_bench.commands.model_cli import (
    CalibrationJobConfig,
    calibration_job_config_from_args,
    calibration_job_parser,
    config_from_args,
)
from osu_dl_bench.errors import UsageError


def _model(*argv: str):
    return config_from_args(build_parser().parse_args(["model", *argv]))


def test_fit_config_is_frozen_and_holds_the_calibration_plan():
    cfg = _model("fit", "run", "--np", "2-4", "--rounds", "3", "--no-corrections")
    assert isinstance(cfg, FitConfig)
    assert (cfg.run_dir, cfg.counts, cfg.rounds, cfg.corrections) == ("run", (2, 3, 4), 3, False)
    assert (cfg.calibrate, cfg.message_size, cfg.append) == ("auto", "8:64M", False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.counts = (2,)


def test_accuracy_config_keeps_the_platform_choice_and_outputs():
    cfg = _model("accuracy", "run", "--inter", "ib-hdr200", "--csv", "points.csv")
    assert isinstance(cfg, AccuracyConfig)
    assert cfg.platform == PlatformChoice(None, "ib-hdr200")
    assert (cfg.output, cfg.plot, cfg.csv) == (None, None, "points.csv")


def test_predict_config_holds_the_jobs_shape_collectives_and_sizes():
    cfg = _model("predict", "--np", "20", "--ppn", "8", "--platform", "p", "-m", "8:64")
    assert isinstance(cfg, PredictConfig)
    assert cfg.layout == JobShape(20, 3, 8)
    assert cfg.collectives == ("allreduce", "bcast")
    assert cfg.sizes == (8, 16, 32, 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.output = "t.json"


def test_train_config_holds_the_report_request():
    cfg = _model("train", "--platform", "p", "--np", "4", "--model", "cnn", "-b", "64")
    assert isinstance(cfg, TrainModelConfig)
    request = cfg.request
    assert (request.model, request.np, request.batch_size, request.threads) == ("cnn", 4, 64, None)
    assert cfg.scale_platform == "ib-hdr200"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.scale_platform = "other"


@pytest.mark.parametrize(
    "argv,words",
    [
        (["fit", "run", "--np", "1,2"], "--np '1,2': expected process counts >= 2"),
        (["fit", "run", "--np", "two"], "--np two: expected counts like 2,4"),
        (["predict", "--np", "0", "--platform", "p"], "--np: expected a process count >= 1"),
        (["predict", "--np", "4", "--ppn", "0", "--platform", "p"], "--ppn: expected ranks"),
        (["predict", "--np", "4", "--platform", "p", "--collectives", "x"], "unknown collective"),
        (["predict", "--np", "4", "--platform", "p", "-o", "t.csv"], "-o t.csv: expected a file"),
        (["train", "--platform", "p", "--scale-ppn", "0"], "--scale-ppn: expected a whole"),
        (["train", "--platform", "p", "--np", "-3"], "--np: expected a whole number >= 1"),
        (["fit", "run", "--rounds", "0"], "--rounds: expected a whole number >= 1"),
        (["fit", "run", "--timeout", "nan"], "--timeout: expected a number of seconds > 0"),
        (["fit", "run", "-m", "abc"], "bad size 'abc'"),
        (["train", "--platform", "p", "--scale-np", "0"], "--scale-np 0: process counts"),
        (["train", "--platform", "p", "--scale-np", "x"], "--scale-np x: expected counts"),
    ],
)
def test_model_refuses_bad_options_when_they_are_parsed(argv, words):
    with pytest.raises(UsageError, match=words):
        _model(*argv)


def test_the_calibration_job_parses_into_a_frozen_config():
    args = calibration_job_parser().parse_args(["run", "-m", "8:1M", "--append"])
    cfg = calibration_job_config_from_args(args)
    assert cfg == CalibrationJobConfig("run", "8:1M", 10, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.rounds = 1
