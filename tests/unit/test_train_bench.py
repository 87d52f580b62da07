"""``osu-dl-bench train-bench`` without a job: its options reach each launch unchanged,
the isolation groups (Gloo's configurations apart, native in every group), the launch
order, the pairing within and across groups, the report's intervals and verdict, the
launches run one after the other with their records merged, and the hard timeout that
stops a job which does not end."""

import json
import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from collectives.registry import lookup
from osu_dl_bench.cli import build_parser, main
from osu_dl_bench.commands import train_bench
from osu_dl_bench.commands.train_bench_options import job_config, worker_argv
from osu_dl_bench.selection.selector import Selector

REFERENCE_TABLE = (
    Path(__file__).resolve().parents[2] / "tuning_tables" / "reference-cpu-mpich-1node.json"
)


def _parse(*argv):
    return build_parser().parse_args(["train-bench", *argv])


def test_the_job_gets_every_option_and_the_worker_flag():
    args = _parse("--np", "3", "--rounds", "2", "--table", "t.json", "--threads", "1", "-b", "8")
    args.launches = 4
    inside = build_parser().parse_args(worker_argv(args, 2, "gloo", "/tmp/p.json"))
    assert inside.worker and not args.worker
    assert job_config(inside) == job_config(args)
    assert job_config(args)["np"] == 3 and job_config(args)["table"] == "t.json"
    assert (inside.launch, inside.group, inside.part, inside.launches) == (
        2,
        "gloo",
        "/tmp/p.json",
        4,
    )


def test_the_job_is_this_package_under_mpiexec_with_np_ranks(monkeypatch):
    monkeypatch.setattr("osu_dl_bench.jobs.launch.find_mpiexec", lambda: "/x/mpiexec")
    cmd = train_bench.job_command(_parse("--np", "4"), 2, "mpi", "p.json")
    assert cmd[:6] == ["/x/mpiexec", "-n", "4", sys.executable, "-m", "osu_dl_bench"]
    assert cmd[6:14] == ["train-bench", "--worker", "--launch", "2"] + [
        "--group",
        "mpi",
        "--part",
        "p.json",
    ]


@pytest.mark.parametrize(
    "argv", [["--np", "0"], ["--steps", "x"], ["--timeout", "-1"], ["--launches", "0"]]
)
def test_bad_options_exit_2_with_one_message(argv, capsys):
    assert main(["train-bench", *argv]) == 2
    assert "expected" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--batch-size", "0"], ["--depth", "-1"]])
def test_a_bad_training_option_is_refused_before_the_run_directory_exists(argv, capsys, tmp_path):
    out = tmp_path / "tb"
    assert main(["train-bench", *argv, "--out", str(out)]) == 2
    assert "expected" in capsys.readouterr().err
    assert not out.exists()  # a second try needs no --resume


def test_every_configuration_leads_one_round_in_turn():
    labels = ["a", "b", "c"]
    orders = [train_bench.rotated_order(labels, i) for i in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


# --- isolation groups -------------------------------------------------------------------


def test_a_configuration_that_may_bind_gloo_is_in_the_gloo_group():
    gloo = lookup("allreduce", "gloo").variant()
    ring, native = lookup("allreduce", "ring").variant(), lookup("allreduce", "native").variant()
    assert train_bench.home_group([ring, native]) == "mpi"
    assert train_bench.home_group([]) == "mpi"
    assert train_bench.home_group([ring, gloo, native]) == "gloo"


def test_native_runs_in_every_group_the_others_in_their_own():
    home = {"native": "mpi", "tuned": "mpi", "gloo": "gloo", "ddp-gloo": "gloo"}
    launched = {
        group: [label for label, g in home.items() if train_bench.in_launch(label, g, group)]
        for group in ("mpi", "gloo", None)
    }
    assert launched == {
        "mpi": ["native", "tuned"],
        "gloo": ["native", "gloo", "ddp-gloo"],
        None: list(home),
    }


_SHAPE = SimpleNamespace(nprocs=2, nodes=1, ppn=2)


def test_a_table_naming_gloo_puts_tuned_in_the_gloo_group():
    selector = Selector.from_file(REFERENCE_TABLE, force={})
    variants = train_bench.selector_variants(selector, _SHAPE, "cpu")
    assert {v.algorithm.name for v in variants} >= {"native"}
    assert train_bench.home_group(variants) == "mpi"
    fixed = selector.with_fixed({"allreduce": lookup("allreduce", "gloo").variant()})
    assert train_bench.home_group(train_bench.selector_variants(fixed, _SHAPE, "cpu")) == "gloo"


def test_launch_1_of_every_group_comes_before_launch_2_in_a_seeded_order():
    order = train_bench.launch_order(3, ("mpi", "gloo"), seed=5)
    assert [n for n, _ in order] == [1, 1, 2, 2, 3, 3]
    assert all({g for n, g in order if n == k} == {"mpi", "gloo"} for k in (1, 2, 3))
    assert train_bench.launch_order(3, ("mpi", "gloo"), seed=5) == order
    orders = {tuple(train_bench.launch_order(3, ("mpi", "gloo"), s)) for s in range(20)}
    assert len(orders) > 1  # the seed shuffles: no group always runs first


# --- pairing and the report -------------------------------------------------------------

# img/s per launch, round by round. tuned and native (mpi group) ran side by side; ddp-gloo
# ran in the gloo group's launches, beside native@gloo.
MPI_RATES = {
    "native": [[100, 100, 100], [100, 100, 100], [100, 100, 100]],
    "tuned": [[100, 130, 200], [120, 120, 120], [140, 90, 150]],
}
GLOO_RATES = {
    "native": [[50, 60, 70], [50, 60, 70], [50, 60, 70]],
    "ddp-gloo": [[100, 100, 100], [100, 100, 100], [100, 100, 100]],
}
HOME = {"native": "mpi", "tuned": "mpi", "ddp-gloo": "gloo"}


def _rows():
    rows = []
    for group, rates in (("gloo", GLOO_RATES), ("mpi", MPI_RATES)):
        for label, launches in rates.items():
            for number, rounds in enumerate(launches, 1):
                for index, rate in enumerate(rounds):
                    row = {"launch": number, "group": group, "round": index, "config": label}
                    rows.append({**row, "img_per_s": float(rate)})
    return rows


def test_across_groups_launch_k_pairs_with_launch_k_on_the_launch_medians():
    summary = train_bench.summarise(_rows(), HOME)
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
    summary = train_bench.summarise(_rows(), HOME)
    # tuned / native per round: 1.0 1.3 2.0 1.2 1.2 1.2 1.4 0.9 1.5 -> median 1.2
    assert summary["tuned"]["vs_native"]["ratio"] == pytest.approx(1.2)
    assert summary["tuned"]["vs_native"]["rounds"] == 9
    assert summary["tuned"]["median_img_per_s"] == 120.0
    # ddp-gloo against native of its own launches, round by round: 2, 5/3, 10/7 each launch
    assert summary["ddp-gloo"]["vs_native"]["ratio"] == pytest.approx(5 / 3)


def test_native_of_another_group_is_kept_apart_under_its_group():
    summary = train_bench.summarise(_rows(), HOME)
    assert list(summary) == ["native", "tuned", "native@gloo", "ddp-gloo"]
    assert summary["native"]["median_img_per_s"] == 100.0
    assert summary["native@gloo"]["median_img_per_s"] == 60.0
    assert summary["native@gloo"]["vs_native"]["ratio"] == 1.0


def _measured(**fields):
    launches = [
        {"launch": n, "group": g, "process_threads": 4 if g == "mpi" else 12}
        | {"torch_distributed": g == "gloo"}
        for n, g in train_bench.launch_order(3, ("mpi", "gloo"), 1)
    ]
    base = dict(nprocs=2, parameters=1234, torch_threads=1, seed=1, launches=launches)
    base["order"] = [(x["launch"], x["group"]) for x in launches]
    return train_bench.Measured(_rows(), HOME, skipped=["x: skipped: y"], **{**base, **fields})


def test_the_report_names_the_interval_of_the_best_tuned_row():
    args = _parse("--rounds", "3", "--warmup", "1", "--steps", "2")
    cfg = train_bench._config(args)
    text, summary = train_bench.report_table(args, cfg, _measured())
    found = summary["tuned"]["vs_ddp"]
    assert "(1,234 parameters)" in text and "# x: skipped: y" in text
    assert "3 launches per isolation group" in text and "(seed 1)" in text
    assert "mpi 4 4 4; gloo 12 12 12; torch.distributed bound in: gloo" in text
    assert text.splitlines()[-1] == (
        f"# best tuned configuration: tuned / ddp-gloo = 1.30 (95% CI "
        f"{found['low']:.2f}-{found['high']:.2f}) over 3 launches"
    )
    tuned_line = next(line for line in text.splitlines() if line.startswith("tuned "))
    assert train_bench.ratio_cell(found) in tuned_line


def test_the_best_tuned_row_is_a_fact_with_its_interval_and_no_verdict():
    def ratio(r):
        return {"ratio": r, "low": r - 0.1, "high": r + 0.1, "launches": 3, "rounds": 15}

    rows = {"tuned": {"vs_ddp": ratio(1.2)}, "tuned/no-overlap": {"vs_ddp": ratio(1.24)}}
    text, found = train_bench.best_tuned({**rows, "tuned/registered": {"vs_ddp": None}})
    assert text == "tuned/no-overlap / ddp-gloo = 1.24 (95% CI 1.14-1.34) over 3 launches"
    assert found["ratio"] == 1.24 and found["config"] == "tuned/no-overlap"
    wide = {"tuned": {"vs_ddp": {**ratio(1.3), "high": 467.5}}}
    assert train_bench.best_tuned(wide)[0].endswith("(95% CI 1.20->100) over 3 launches")
    assert train_bench.best_tuned({"native": {"vs_ddp": ratio(1.0)}}) == (
        "no tuned configuration measured",
        None,
    )


# --- the launches, one after the other --------------------------------------------------


def _fake_launches(monkeypatch, fail_at=None):
    """launch_job writing each launch's record as a worker would; returns the launches."""
    ran = []

    def launch_job(cmd, timeout, what):
        number, group, part = (
            cmd[cmd.index(flag) + 1] for flag in ("--launch", "--group", "--part")
        )
        ran.append((int(number), group, timeout))
        if len(ran) == fail_at:
            return 3
        rows = [r for r in _rows() if r["group"] == group and r["launch"] == int(number)]
        record = {"launch": int(number), "group": group, "nprocs": 2, "rows": rows}
        record |= {"configs": HOME, "measured": [], "skipped": [f"s {group}", "same"]}
        record |= {"parameters": 10, "torch_threads": 1, "metadata": {"host": "h"}}
        record |= {"process_threads": 4 if group == "mpi" else 12}
        record |= {"nodes": 1, "ppn": 2, "hosts": ["h"], "global_batch": 8, "steps": 2}
        with open(part, "w") as f:
            json.dump(record, f)
        return 0

    monkeypatch.setattr(train_bench, "launch_job", launch_job)
    monkeypatch.setattr("osu_dl_bench.jobs.launch.find_mpiexec", lambda: "/x/mpiexec")
    monkeypatch.setattr("osu_dl_bench.train.options.require_libraries", lambda cfg: None)
    return ran


def test_every_group_runs_in_launches_of_its_own_and_the_json_keeps_them(
    monkeypatch, tmp_path, capsys
):
    ran = _fake_launches(monkeypatch)
    out = tmp_path / "t"
    args = _parse("--launches", "3", "--seed", "9", "--timeout", "50", "--out", str(out))
    assert train_bench.run_train_bench(args) == 0
    expected = train_bench.launch_order(3, ("mpi", "gloo"), 9)
    assert [(n, g) for n, g, _ in ran] == expected and {t for *_, t in ran} == {50}
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["launch_order"] == {"seed": 9, "order": [f"{n}/{g}" for n, g in expected]}
    assert [(x["launch"], x["group"], x["process_threads"]) for x in data["launches"]] == [
        (n, g, 4 if g == "mpi" else 12) for n, g in expected
    ]
    assert len(data["rows"]) == len(_rows())
    first, second = expected[0][1], expected[1][1]
    assert data["skipped"] == [f"s {first}", "same", f"s {second}"]  # each once
    best = data["best_tuned_vs_ddp"]
    assert best["ratio"] == pytest.approx(1.3) and best["launches"] == 3 and "target" not in data
    assert out.with_suffix(".txt").read_text() in capsys.readouterr().out


def test_a_failed_launch_stops_the_command_with_its_exit_code(monkeypatch, tmp_path):
    ran = _fake_launches(monkeypatch, fail_at=2)
    out = tmp_path / "t"
    assert train_bench.run_train_bench(_parse("--out", str(out))) == 3
    assert len(ran) == 2 and not out.with_suffix(".json").exists()


def test_a_job_past_its_timeout_is_stopped(capsys):
    start = time.monotonic()
    code = train_bench.launch_job([sys.executable, "-c", "import time; time.sleep(60)"], 1)
    assert code == 1 and time.monotonic() - start < 30
    assert "did not finish within 1 s" in capsys.readouterr().err


def test_a_job_that_ends_gives_its_exit_code():
    assert train_bench.launch_job([sys.executable, "-c", "raise SystemExit(3)"], 30) == 3


# --- the run directory ------------------------------------------------------------------


def test_the_run_directory_keeps_every_launch_and_merge_reads_it(monkeypatch, tmp_path):
    from osu_dl_bench.measurement.store import RunStore

    _fake_launches(monkeypatch)
    for name in ("a", "b"):
        args = _parse("--launches", "3", "--seed", "9", "--out", str(tmp_path / name))
        assert train_bench.run_train_bench(args) == 0
    store = RunStore(tmp_path / "a")
    frame = store.load()
    # one row per configuration and launch of a group, its rounds paired by round
    assert len(frame) == len({(r["config"], r["launch"], r["group"]) for r in _rows()})
    assert set(frame["collective"]) == {"train_step"} and set(frame["rounds"]) == {3}
    tuned = frame[(frame["algorithm"] == "tuned") & (frame["launch"] == 1)].iloc[0]
    assert tuned["median_us"] == pytest.approx(8 / 130 * 1e6)  # global batch / img/s
    metadata = store.read_metadata()
    assert metadata["experiment"] == "train-bench" and metadata["complete"] is True
    assert sorted(metadata["jobs"]["2"]["launches"]) == ["1/gloo", "1/mpi", "2/gloo"] + [
        "2/mpi",
        "3/gloo",
        "3/mpi",
    ]
    merged = tmp_path / "merged"
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(merged)]) == 0
    assert len(RunStore(merged).load()) == 2 * len(frame)


def test_a_stopped_run_resumes_with_only_the_launches_it_lacks(monkeypatch, tmp_path, capsys):
    out = tmp_path / "t"
    _fake_launches(monkeypatch, fail_at=3)
    args = ["--launches", "3", "--seed", "9", "--out", str(out)]
    assert train_bench.run_train_bench(_parse(*args)) == 3
    assert not out.with_suffix(".json").exists()
    capsys.readouterr()
    # the run directory holds two launches: without --resume it is refused, one message
    assert main(["train-bench", *args]) == 2
    assert "add --resume" in capsys.readouterr().err
    assert main(["train-bench", *args, "--rounds", "4", "--resume"]) == 2
    assert "other options (rounds)" in capsys.readouterr().err
    ran = _fake_launches(monkeypatch)
    assert train_bench.run_train_bench(_parse(*args, "--resume")) == 0
    expected = train_bench.launch_order(3, ("mpi", "gloo"), 9)
    assert [(n, g) for n, g, _ in ran] == expected[2:]  # the first two are kept
    data = json.loads(out.with_suffix(".json").read_text())
    assert len(data["rows"]) == len(_rows())
    assert data["launch_order"]["order"] == [f"{n}/{g}" for n, g in expected]


def test_a_run_directory_in_use_is_refused(monkeypatch, tmp_path, capsys):
    from osu_dl_bench.measurement.store import RunStore

    ran = _fake_launches(monkeypatch)
    out = tmp_path / "t"
    with RunStore(out).lock():
        assert main(["train-bench", "--out", str(out)]) == 2
    assert "in use by another run" in capsys.readouterr().err and not ran
