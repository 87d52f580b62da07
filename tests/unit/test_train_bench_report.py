"""train.bench_report: the pairing of train-bench's measurements (round by round within a
group, launch k with launch k across groups), the report's intervals, and the best tuned
row as a fact with its interval."""

import math

import numpy as np
import pytest
from scipy import stats
from support.train_bench import HOME, rows

from osu_dl_bench.cli import build_parser
from osu_dl_bench.commands.train_bench import launch_order
from osu_dl_bench.commands.train_bench_cli import config_from_args
from osu_dl_bench.train.bench_report import (
    Measured,
    best_tuned,
    ratio_cell,
    report_table,
    summarise,
)


def test_across_groups_launch_k_pairs_with_launch_k_on_the_launch_medians():
    summary = summarise(rows(), HOME)
    vs_ddp = summary["tuned"]["vs_ddp"]
    # launch medians 130, 120, 140 against 100: 1.3, 1.2, 1.4 (round by round it would be
    # the median of nine ratios, 1.2)
    assert vs_ddp["ratio"] == pytest.approx(1.3)
    assert vs_ddp["launches"] == 3 and vs_ddp["rounds"] == 9
    # widened to Student's t over the three launches' log-ratios
    logs = np.log([1.3, 1.2, 1.4])
    half = stats.t.ppf(0.975, 2) * logs.std(ddof=1) / math.sqrt(3)
    assert vs_ddp["low"] <= math.exp(logs.mean() - half) + 1e-9
    assert vs_ddp["high"] >= math.exp(logs.mean() + half) - 1e-9


def test_within_a_group_the_ratio_pairs_round_by_round():
    summary = summarise(rows(), HOME)
    # tuned / native per round: 1.0 1.3 2.0 1.2 1.2 1.2 1.4 0.9 1.5 -> median 1.2
    assert summary["tuned"]["vs_native"]["ratio"] == pytest.approx(1.2)
    assert summary["tuned"]["vs_native"]["rounds"] == 9
    assert summary["tuned"]["median_img_per_s"] == 120.0
    # ddp-gloo against native of its own launches, round by round: 2, 5/3, 10/7 each launch
    assert summary["ddp-gloo"]["vs_native"]["ratio"] == pytest.approx(5 / 3)


def test_native_of_another_group_is_kept_apart_under_its_group():
    summary = summarise(rows(), HOME)
    assert list(summary) == ["native", "tuned", "native@gloo", "ddp-gloo"]
    assert summary["native"]["median_img_per_s"] == 100.0
    assert summary["native@gloo"]["median_img_per_s"] == 60.0
    assert summary["native@gloo"]["vs_native"]["ratio"] == 1.0


def _measured(**fields):
    launches = [
        {"launch": n, "group": g, "process_threads": 4 if g == "mpi" else 12}
        | {"torch_distributed": g == "gloo"}
        for n, g in launch_order(3, ("mpi", "gloo"), 1)
    ]
    base = dict(nprocs=2, parameters=1234, torch_threads=1, seed=1, launches=launches)
    base["order"] = [(x["launch"], x["group"]) for x in launches]
    return Measured(rows(), HOME, skipped=["x: skipped: y"], **{**base, **fields})


def test_the_report_names_the_interval_of_the_best_tuned_row():
    argv = ["train-bench", "--rounds", "3", "--warmup", "1", "--steps", "2"]
    cfg = config_from_args(build_parser().parse_args(argv))
    text, summary = report_table(cfg, _measured())
    found = summary["tuned"]["vs_ddp"]
    assert "(1,234 parameters)" in text and "# x: skipped: y" in text
    assert "3 launches per isolation group" in text and "(seed 1)" in text
    assert "3 rounds per launch" in text and "1 warm-up + 2 timed steps each" in text
    assert "mpi 4 4 4; gloo 12 12 12; torch.distributed bound in: gloo" in text
    assert text.splitlines()[-1] == (
        f"# best tuned configuration: tuned / ddp-gloo = 1.30 (95% CI "
        f"{found['low']:.2f}-{found['high']:.2f}) over 3 launches"
    )
    tuned_line = next(line for line in text.splitlines() if line.startswith("tuned "))
    assert ratio_cell(found) in tuned_line


def test_the_best_tuned_row_is_a_fact_with_its_interval_and_no_verdict():
    def ratio(r):
        return {"ratio": r, "low": r - 0.1, "high": r + 0.1, "launches": 3, "rounds": 15}

    found_rows = {"tuned": {"vs_ddp": ratio(1.2)}, "tuned/no-overlap": {"vs_ddp": ratio(1.24)}}
    text, found = best_tuned({**found_rows, "tuned/registered": {"vs_ddp": None}})
    assert text == "tuned/no-overlap / ddp-gloo = 1.24 (95% CI 1.14-1.34) over 3 launches"
    assert found["ratio"] == 1.24 and found["config"] == "tuned/no-overlap"
    wide = {"tuned": {"vs_ddp": {**ratio(1.3), "high": 467.5}}}
    assert best_tuned(wide)[0].endswith("(95% CI 1.20->100) over 3 launches")
    assert best_tuned({"native": {"vs_ddp": ratio(1.0)}}) == (
        "no tuned configuration measured",
        None,
    )


def test_each_configuration_reports_the_share_of_its_communication_hidden_behind_backward():
    timed = []
    for row in rows():
        if row["config"] == "tuned":  # 4 ms busy, exposed 1 ms in round 0, else 3 ms
            exposed = 1.0 if row["round"] == 0 else 3.0
            row = row | {"busy_ms": 4.0, "exposed_ms": exposed, "clock": "cuda events"}
        timed.append(row)
    summary = summarise(timed, HOME)
    assert summary["tuned"]["hidden_fraction"] == pytest.approx(0.25)  # median of .75 .25 .25
    assert summary["tuned"]["clock"] == "cuda events"
    assert "hidden_fraction" not in summary["ddp-gloo"]  # DDP does not expose its timing
    import dataclasses

    cfg = config_from_args(build_parser().parse_args(["train-bench"]))
    text, _ = report_table(cfg, dataclasses.replace(_measured(), rows=timed))
    assert "(timed with CUDA events on the device)" in text
    lines = text.splitlines()
    assert next(line for line in lines if line.startswith("tuned ")).endswith("25%")
    assert next(line for line in lines if line.startswith("ddp-gloo ")).endswith("-")
