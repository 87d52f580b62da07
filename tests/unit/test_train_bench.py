"""``osu-dl-bench train-bench`` without a job: its options, parsed into a frozen config,
reach each launch unchanged, the launch order, the launches run one after the other with
their records merged, the hard timeout that stops a job which does not end, the run
directory and how a stopped run is continued."""

import dataclasses
import json
import shlex
import sys
import time

import pytest
from support.interpreter import run_python
from support.train_bench import HOME, rows

from osu_dl_bench.cli import build_parser, main
from osu_dl_bench.commands import train_bench
from osu_dl_bench.commands.train_bench_cli import config_from_args
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.orchestrate import JobOutcome
from osu_dl_bench.jobs.progress import encode_event
from osu_dl_bench.train.bench_config import recorded_options, worker_argv
from osu_dl_bench.train.bench_launch import rotated_order


def _parse(*argv):
    return config_from_args(build_parser().parse_args(["train-bench", *argv]))


def test_the_config_is_frozen():
    cfg = _parse("--np", "3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.np = 4  # type: ignore[misc]


def test_out_names_the_outputs_without_a_trailing_slash():
    assert _parse("--out", "runs/x/").out == "runs/x"  # not runs/x/.txt inside the run
    for name in ("./", "", ".."):
        with pytest.raises(UsageError, match="--out: expected a name the outputs are named"):
            _parse("--out", name)


def test_the_job_gets_every_option_and_the_worker_flag():
    cfg = _parse("--np", "3", "--rounds", "2", "--table", "t.json", "--threads", "1", "-b", "8")
    cfg = dataclasses.replace(cfg, launches=4)
    inside = _parse(*worker_argv(cfg, 2, "gloo", "/tmp/p.json")[1:])
    assert inside.worker and not cfg.worker
    assert recorded_options(inside) == recorded_options(cfg)
    assert recorded_options(cfg)["np"] == 3 and recorded_options(cfg)["table"] == "t.json"
    assert (inside.launch, inside.group, inside.part, inside.launches) == (
        2,
        "gloo",
        "/tmp/p.json",
        4,
    )


def test_only_reaches_the_job_sorted_once_each_and_is_not_recorded_when_unset():
    cfg = _parse("--only", "tree:seg=256K,trees=1, ddp-nccl,ddp-nccl")
    inside = _parse(*worker_argv(cfg, 1, "nccl")[1:])
    assert inside.only == cfg.only == "ddp-nccl,tree:seg=256K,trees=1"
    assert "only" not in recorded_options(_parse())  # run directories made before it resume


def test_an_unknown_only_label_is_refused_before_the_run_directory_exists(tmp_path, capsys):
    out = tmp_path / "tb"
    assert main(["train-bench", "--only", "nccl,bogus", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--only: no configuration is named bogus; the labels are" in err and "ddp-nccl" in err
    assert not out.exists()


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
    "argv",
    [
        ["--np", "0"],
        ["--steps", "x"],
        ["--timeout", "-1"],
        ["--timeout", "inf"],
        ["--launches", "0"],
        ["--warmup", "-1"],
        ["--seed", "x"],
        ["--np", "99999999999999999999"],
        ["--launches", "1000000000000"],
        ["--only", "nccl,,ddp-nccl"],
        ["--only", "nccl,\x1b[2J"],
        ["--only", "-x"],
    ],
)
def test_bad_options_exit_2_with_one_message(argv, capsys):
    assert main(["train-bench", *argv]) == 2
    assert "expected" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--batch-size", "0"], "-b 0: a global batch smaller than the 2 ranks"),
        (["--depth", "-1"], "expected"),
        (["--np", "3", "-b", "2"], "-b 2: a global batch smaller than the 3 ranks"),
    ],
)
def test_a_bad_training_option_is_refused_before_the_run_directory_exists(
    argv, words, capsys, tmp_path
):
    out = tmp_path / "tb"
    assert main(["train-bench", *argv, "--out", str(out)]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()  # a second try needs no --resume


@pytest.mark.parametrize("option", ["--table", "--adapted-table"])
@pytest.mark.parametrize(
    "content,words", [(None, "cannot read"), ("{bad", "not JSON"), ("{}", "schema")]
)
def test_a_missing_or_malformed_table_is_refused_before_the_run_directory_exists(
    option, content, words, capsys, tmp_path
):
    table, out = tmp_path / "t.json", tmp_path / "tb"
    if content is not None:
        table.write_text(content)
    assert main(["train-bench", option, str(table), "--out", str(out)]) == 2
    assert f"tuning table {table}" in capsys.readouterr().err and not out.exists()


def test_started_as_an_mpi_rank_it_refuses_to_nest_its_jobs(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PMI_RANK", "0")
    assert main(["train-bench", "--out", str(tmp_path / "tb")]) == 2
    assert "train-bench was started by an MPI launcher (PMI_RANK is set)" in capsys.readouterr().err
    assert not (tmp_path / "tb").exists()


def test_every_configuration_leads_one_round_in_turn():
    labels = ["a", "b", "c"]
    orders = [rotated_order(labels, i) for i in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_the_worker_starts_mpi_itself_at_the_trainers_thread_level():
    # Nothing the worker imports before init_training_mpi may load mpi4py.MPI: importing it
    # starts MPI at mpi4py's default level (multiple), not the trainer's (serialized).
    code = (
        "import sys\n"
        "from osu_dl_bench.cli import build_parser\n"
        "build_parser()\n"
        "import osu_dl_bench.commands.train_bench, osu_dl_bench.train.bench_launch\n"
        "print('mpi4py.MPI' in sys.modules)\n"
    )
    assert run_python(code).stdout.strip() == "False"


# --- the launches, one after the other --------------------------------------------------


def test_launch_1_of_every_group_comes_before_launch_2_in_a_seeded_order():
    order = train_bench.launch_order(3, ("mpi", "gloo"), seed=5)
    assert [n for n, _ in order] == [1, 1, 2, 2, 3, 3]
    assert all({g for n, g in order if n == k} == {"mpi", "gloo"} for k in (1, 2, 3))
    assert train_bench.launch_order(3, ("mpi", "gloo"), seed=5) == order
    orders = {tuple(train_bench.launch_order(3, ("mpi", "gloo"), s)) for s in range(20)}
    assert len(orders) > 1  # the seed shuffles: no group always runs first


def _fake_launches(monkeypatch, fail_at=None):
    """follow_launch writing each launch's record as a worker would; returns the launches."""
    ran = []

    def follow_launch(cfg, cmd, job, heartbeats):
        number, group, part = (
            cmd[cmd.index(flag) + 1] for flag in ("--launch", "--group", "--part")
        )
        ran.append((int(number), group, cfg.timeout))
        if len(ran) == fail_at:
            return JobOutcome(3, finished=False, failures=0)
        mine = [r for r in rows() if r["group"] == group and r["launch"] == int(number)]
        record = {"launch": int(number), "group": group, "nprocs": 2, "rows": mine}
        record |= {"configs": HOME, "measured": [], "skipped": [f"s {group}", "same"]}
        record |= {"parameters": 10, "torch_threads": 1, "metadata": {"host": "h"}}
        record |= {"process_threads": 4 if group == "mpi" else 12}
        record |= {"nodes": 1, "ppn": 2, "hosts": ["h"], "global_batch": 8, "steps": 2}
        with open(part, "w") as f:
            json.dump(record, f)
        return JobOutcome(0, finished=False, failures=0)

    monkeypatch.setattr(train_bench, "follow_launch", follow_launch)
    monkeypatch.setattr("osu_dl_bench.jobs.launch.find_mpiexec", lambda: "/x/mpiexec")
    monkeypatch.setattr("osu_dl_bench.train.config.require_libraries", lambda cfg: None)
    return ran


def test_every_group_runs_in_launches_of_its_own_and_the_json_keeps_them(
    monkeypatch, tmp_path, capsys
):
    ran = _fake_launches(monkeypatch)
    out = tmp_path / "t"
    cfg = _parse("--launches", "3", "--seed", "9", "--timeout", "50", "--out", str(out))
    assert train_bench.run_train_bench(cfg) == 0
    expected = train_bench.launch_order(3, ("mpi", "gloo"), 9)
    assert [(n, g) for n, g, _ in ran] == expected and {t for *_, t in ran} == {50}
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["launch_order"] == {"seed": 9, "order": [f"{n}/{g}" for n, g in expected]}
    assert [(x["launch"], x["group"], x["process_threads"]) for x in data["launches"]] == [
        (n, g, 4 if g == "mpi" else 12) for n, g in expected
    ]
    assert len(data["rows"]) == len(rows())
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


def _followed(tmp_path, code: str, *options: str):
    """How train-bench's follower saw a job running ``python -c CODE``."""
    cfg = _parse("--out", str(tmp_path / "t"), *options)
    cmd = [sys.executable, "-c", code]
    return cfg, train_bench.follow_launch(cfg, cmd, (2, 1, "mpi"), None)


def test_a_job_past_its_timeout_is_stopped(tmp_path):
    start = time.monotonic()
    # It writes a line a second: never stalled, only too long.
    code = "import time\nwhile True: print('step', flush=True); time.sleep(1)"
    cfg, outcome = _followed(tmp_path, code, "--timeout", "3")
    assert outcome.code == 1 and outcome.over_limit and time.monotonic() - start < 30
    message = train_bench._stopped_message(cfg, "launch 1 of group mpi", outcome)
    assert "launch 1 of group mpi did not finish within 3 s (--timeout)" in message


def test_a_job_that_writes_nothing_for_the_stall_timeout_is_stopped_and_says_where(tmp_path):
    start = time.monotonic()
    event = encode_event("measuring", what="ddp-gloo (launch 1/1 gloo round 1/2)")
    code = f"import time\nprint({event!r}, flush=True)\ntime.sleep(60)"
    cfg, outcome = _followed(tmp_path, code, "--stall-timeout", "3")
    assert outcome.stalled_at == "ddp-gloo (launch 1/1 gloo round 1/2)"
    assert time.monotonic() - start < 30
    message = train_bench._stopped_message(cfg, "launch 1 of group gloo", outcome)
    assert "reported nothing for 3 s (--stall-timeout) while measuring ddp-gloo" in message
    assert "continue with" in message


def test_a_job_that_ends_gives_its_exit_code(tmp_path):
    assert _followed(tmp_path, "raise SystemExit(3)")[1].code == 3


def test_the_launched_job_waits_at_a_rendezvous_for_a_quarter_of_the_stall_timeout(tmp_path):
    variable = "OSU_DL_BENCH_RENDEZVOUS_TIMEOUT"
    code = f"import os; raise SystemExit(int(float(os.environ['{variable}'])))"
    assert _followed(tmp_path, code, "--stall-timeout", "40")[1].code == 10


# --- the run directory ------------------------------------------------------------------


def test_the_run_directory_keeps_every_launch_and_merge_reads_it(monkeypatch, tmp_path):
    from osu_dl_bench.measurement.store import RunStore

    _fake_launches(monkeypatch)
    for name in ("a", "b"):
        cfg = _parse("--launches", "3", "--seed", "9", "--out", str(tmp_path / name))
        assert train_bench.run_train_bench(cfg) == 0
    store = RunStore(tmp_path / "a")
    frame = store.load()
    # one row per configuration and launch of a group, its rounds paired by round
    assert len(frame) == len({(r["config"], r["launch"], r["group"]) for r in rows()})
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
    assert len(data["rows"]) == len(rows())
    assert data["launch_order"]["order"] == [f"{n}/{g}" for n, g in expected]


def test_a_failed_launch_names_the_command_that_continues_the_run(monkeypatch, tmp_path, capsys):
    out = tmp_path / "t"
    _fake_launches(monkeypatch, fail_at=3)
    argv = ["--launches", "3", "--seed", "9", "--rounds", "3", "--timeout", "50", "--out"]
    assert main(["train-bench", *argv, str(out)]) == 3
    said = capsys.readouterr().err.splitlines()
    err = said[-1] if said else ""
    expected = train_bench.launch_order(3, ("mpi", "gloo"), 9)
    number, group = expected[2]
    assert err.startswith(f"osu-dl-bench: error: launch {number} of group {group} ended with")
    assert f"kept in {out}: continue with osu-dl-bench train-bench " in err
    command = shlex.split(err.partition("continue with ")[2])
    assert command[-1] == "--resume" and command[command.index("--timeout") + 1] == "50.0"
    # the command it names continues the run: only the launches it lacks run
    ran = _fake_launches(monkeypatch)
    assert main(command[1:]) == 0
    assert [(n, g) for n, g, _ in ran] == expected[2:] and {t for *_, t in ran} == {50}
    assert len(json.loads(out.with_suffix(".json").read_text())["rows"]) == len(rows())


def test_a_run_directory_in_use_is_refused(monkeypatch, tmp_path, capsys):
    from osu_dl_bench.measurement.store import RunStore

    ran = _fake_launches(monkeypatch)
    out = tmp_path / "t"
    with RunStore(out).lock():
        assert main(["train-bench", "--out", str(out)]) == 2
    assert "in use by another run" in capsys.readouterr().err and not ran


def test_device_cuda_reaches_each_launch_and_cpu_runs_record_as_before():
    cfg = _parse("--device", "cuda", "--np", "2")
    inside = _parse(*worker_argv(cfg, 1, "nccl", "/tmp/p.json")[1:])
    assert inside.device == "cuda" and recorded_options(inside)["device"] == "cuda"
    assert "device" not in recorded_options(_parse())  # older run directories still resume
    assert "--device" not in worker_argv(_parse())


def test_device_cuda_is_refused_where_torch_has_no_gpu(cupy, monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "tb"
    assert main(["train-bench", "--device", "cuda", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("osu-dl-bench: error") == 1 and "torch sees no GPU here" in err
    assert not out.exists()
