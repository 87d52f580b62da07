"""``osu-dl-bench train-bench`` without a job: its options reach the job unchanged, the
order of configurations rotates, the report's ratios and verdict, and the hard timeout
that stops a job which does not end."""

import sys
import time

import pytest

from osu_dl_bench.cli import build_parser, main
from osu_dl_bench.commands import train_bench
from osu_dl_bench.commands.train_bench_options import job_config, worker_argv


def _parse(*argv):
    return build_parser().parse_args(["train-bench", *argv])


def test_the_job_gets_every_option_and_the_worker_flag():
    args = _parse("--np", "3", "--rounds", "2", "--table", "t.json", "--threads", "1", "-b", "8")
    inside = build_parser().parse_args(worker_argv(args))
    assert inside.worker and not args.worker
    assert job_config(inside) == job_config(args)
    assert job_config(args)["np"] == 3 and job_config(args)["table"] == "t.json"


def test_the_job_is_this_package_under_mpiexec_with_np_ranks(monkeypatch):
    monkeypatch.setattr("osu_dl_bench.jobs.launch.find_mpiexec", lambda: "/x/mpiexec")
    cmd = train_bench.job_command(_parse("--np", "4"))
    assert cmd[:6] == ["/x/mpiexec", "-n", "4", sys.executable, "-m", "osu_dl_bench"]
    assert cmd[6:8] == ["train-bench", "--worker"]


@pytest.mark.parametrize("argv", [["--np", "0"], ["--steps", "x"], ["--timeout", "-1"]])
def test_bad_options_exit_2_with_one_message(argv, capsys):
    assert main(["train-bench", *argv]) == 2
    assert "expected" in capsys.readouterr().err


def test_every_configuration_leads_one_round_in_turn():
    labels = ["a", "b", "c"]
    orders = [train_bench.rotated_order(labels, i) for i in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def _rows():
    rates = {
        0: {"native": 100.0, "tuned": 150.0, "ddp-gloo": 120.0},
        1: {"native": 100.0, "tuned": 110.0, "ddp-gloo": 110.0},
        2: {"native": 100.0, "tuned": 140.0, "ddp-gloo": 100.0},
    }
    return [
        {"round": r, "config": label, "img_per_s": rate}
        for r, by_label in rates.items()
        for label, rate in by_label.items()
    ]


def test_ratios_are_taken_per_round_then_summarised():
    text, median = train_bench.ratio_text(_rows(), "tuned", "ddp-gloo")
    # per round: 1.25, 1.00, 1.40
    assert median == pytest.approx(1.25) and text == "1.25 [1.00..1.40]"
    assert train_bench.ratio_text(_rows(), "tuned", "absent") == ("-", None)


def test_the_report_judges_the_target_on_the_best_tuned_row():
    args = _parse("--rounds", "3", "--warmup", "1", "--steps", "2")
    cfg = train_bench._config(args)
    text, summary = train_bench.report_table(args, cfg, 2, 1234, 1, _rows(), ["x: skipped: y"])
    assert summary["tuned"]["median_img_per_s"] == 140.0
    assert summary["ddp-gloo"]["vs_ddp"] == pytest.approx(1.0)
    assert "(1,234 parameters)" in text and "# x: skipped: y" in text
    assert text.splitlines()[-1] == (
        "# target tuned >= 1.1x ddp-gloo: tuned / ddp-gloo = 1.25 (median of per-round ratios): MET"
    )
    slow = {"tuned": {"vs_ddp": 1.05}, "tuned/no-overlap": {"vs_ddp": None}}
    assert train_bench.verdict(slow)[0].endswith("NOT MET")
    assert train_bench.verdict({"native": {"vs_ddp": 1.0}}) == (
        "no tuned configuration measured",
        None,
    )


def test_a_job_past_its_timeout_is_stopped(capsys):
    start = time.monotonic()
    code = train_bench.launch_job([sys.executable, "-c", "import time; time.sleep(60)"], 1)
    assert code == 1 and time.monotonic() - start < 30
    assert "did not finish within 1 s" in capsys.readouterr().err


def test_a_job_that_ends_gives_its_exit_code():
    assert train_bench.launch_job([sys.executable, "-c", "raise SystemExit(3)"], 30) == 3
