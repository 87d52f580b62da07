"""``osu-dl-bench train`` under real mpiexec, each job with a hard timeout: equivalence with
1-process training at p = 1, 2, 3 (float64, so the bound holds on every CPU), a wrong
allreduce on one rank failing it, the validation matrix script at p = 3, digits accuracy
on 2 ranks, kill-and-resume bit for bit, a tuning table driving the choice, and bad input
exiting 2 on every rank."""

import json
import sys

import pytest
from mpirun import REPO, mpi_env, run_cli, run_mpi, run_with_timeout
from support.training import SMALL_BUCKETS, needs_train_extras
from support.tuning import p2_train_table

from osu_dl_bench.train.config import FLOAT64_TOLERANCE

pytestmark = needs_train_extras
TIMEOUT = 300


def _train(nprocs: int, tmp_path, *argv: str, env=None, name="summary.json"):
    out = tmp_path / name
    res = run_cli(nprocs, ["train", *argv, "--json", str(out)], timeout=TIMEOUT, env=env)
    summary = json.loads(out.read_text()) if out.exists() else None
    return res, summary


def _assert_matches_one_process(res, summary, steps: int) -> None:
    assert res.returncode == 0, res.stderr
    validation = summary["validation"]
    assert validation["passed"] and validation["steps"] == steps
    assert validation["dtype"] == "float64" and validation["tolerance"] == FLOAT64_TOLERANCE
    assert validation["max_abs_diff"] <= FLOAT64_TOLERANCE
    assert {b["dtype"] for b in summary["buckets"]} == {"float64"}
    assert "validation: max |p-rank - 1-process parameter|" in res.stdout and "PASS" in res.stdout


@pytest.mark.parametrize(
    "nprocs,extra",
    [
        (1, []),
        (3, [*SMALL_BUCKETS, "--allreduce", "ring:seg=4K", "--bcast", "chain:seg=16K"]),
        # Buckets in registered memory, reduced by cma straight from the peers' buckets.
        (2, [*SMALL_BUCKETS, "--allreduce", "cma", "--buffers", "cpu-registered"]),
    ],
)
def test_p_ranks_match_one_process_training(tmp_path, nprocs, extra):
    res, summary = _train(nprocs, tmp_path, "--steps", "12", "-b", "60", "--validate", *extra)
    _assert_matches_one_process(res, summary, 12)
    if "--buffers" in extra:
        assert "in cpu-registered memory" in res.stdout
        assert {b["algorithm"] for b in summary["buckets"]} == {"cma:chunk=512K"}
    elif nprocs > 1:
        assert len(summary["buckets"]) == 3
        assert {b["algorithm"] for b in summary["buckets"]} == {"ring:seg=4K"}
        assert {b["algorithm"] for b in summary["bcasts"]} == {"chain:seg=16K"}


@pytest.mark.parametrize(
    "nprocs,level", [(2, "single"), (3, "single"), (4, "funneled"), (5, "single"), (6, "multiple")]
)
def test_defaults_train_at_any_p_whatever_the_thread_level_environment(tmp_path, nprocs, level):
    # The default global batch of 64 splits unevenly at p = 3, 5, 6: matching 1-process
    # training shows each rank's gradient is weighted by its share.
    env = {"MPI4PY_RC_THREAD_LEVEL": level}
    res, summary = _train(nprocs, tmp_path, "--steps", "3", "--validate", env=env)
    _assert_matches_one_process(res, summary, 3)
    overridden = "MPI4PY_RC_THREAD_LEVEL=" + level + " is below what the trainer needs"
    assert (overridden in res.stdout) == (level in ("single", "funneled")), res.stdout
    assert summary["metadata"]["thread_level"] == (
        "multiple" if level == "multiple" else "serialized"
    )
    if 64 % nprocs:
        assert (
            f"{64 // nprocs + 1} on {64 % nprocs} rank(s), {64 // nprocs} on the others"
            in res.stdout
        )


def test_two_ranks_match_one_process_and_reach_95_percent_on_digits(tmp_path):
    # Native allreduce overlapped over 3 buckets; the reference runs beside the first 20.
    res, summary = _train(2, tmp_path, "--epochs", "6", "--validate", *SMALL_BUCKETS)
    _assert_matches_one_process(res, summary, 20)
    assert len(summary["buckets"]) == 3
    epochs = summary["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4, 5, 6]
    assert epochs[-1]["test_accuracy"] >= 0.95, epochs
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    for text in ("train_loss", "img/s per rank:", "img/s total:", "hidden behind backward"):
        assert text in res.stdout
    throughput = summary["throughput"]
    assert throughput["total_mean"] > 0 and throughput["per_rank_ci"] >= 0
    assert summary["communication"]["busy_ms"] > 0 and summary["nprocs"] == 2
    # On the CPU the host's clock; per bucket, its reduction ends after its gradients.
    assert summary["communication"]["clock"] == "host"
    timings = summary["communication"]["buckets"]
    assert len(timings) == 3 and all(b["ready_ms"] <= b["end_ms"] for b in timings)


def test_an_allreduce_wrong_in_one_element_on_one_rank_fails_validation(tmp_path):
    # Rank 2 (not the one holding the reference) adds 1e-8 to one element of bucket 1
    # after each reduction: lr x 1e-8 per step, far below float32 rounding's old 1e-5.
    wrong = {"OSU_DL_BENCH_TRAIN_WRONG_ALLREDUCE": "2:1:1e-8"}
    argv = ["--steps", "6", "-b", "60", "--validate", "--no-overlap", *SMALL_BUCKETS]
    res, summary = _train(3, tmp_path, *argv, env=wrong)
    assert res.returncode == 1, res.stderr
    validation = summary["validation"]
    assert not validation["passed"] and validation["rank"] == 2
    diff = validation["max_abs_diff"]
    assert FLOAT64_TOLERANCE < diff < 1e-6
    message = [line for line in res.stdout.splitlines() if "VALIDATION FAILED" in line]
    assert len(message) == 1
    assert f"by {diff:.3g} > tolerance {FLOAT64_TOLERANCE:.3g} (rank 2, " in message[0]
    assert validation["parameter"] in message[0] and "after 6 steps in float64" in message[0]


def test_validation_matrix_script_at_three_ranks(tmp_path):
    # One mpiexec job, several cases: odd p, overlap on and off, fp16 compression, and a
    # bcast that needs a power-of-two p (the trainer refuses it: N/A with its reason).
    out = tmp_path / "rows.json"
    cmd = [sys.executable, str(REPO / "scripts" / "validate_training_matrix.py")]
    cmd += ["--nprocs", "3", "--allreduce", "rabenseifner,cma", "--fp16"]
    cmd += ["--bcast", "scatter_ring_allgather,scatter_rd_allgather", "--json", str(out)]
    res = run_with_timeout(cmd, TIMEOUT, mpi_env())
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads(out.read_text())
    cases = {(r["allreduce"], r["bcast"], r["overlap"], r["fp16"]) for r in rows}
    assert len(cases) == len(rows) == 10 and "# 8 PASS, 0 FAIL, 2 N/A" in res.stdout
    for row in rows:
        if row["bcast"] == "scatter_rd_allgather":
            assert row["result"] == "N/A" and "power-of-two" in row["note"]
            continue
        assert row["result"] == "PASS" and row["p"] == 3, row
        if row["fp16"]:  # compression error is real: above float64's bound, within its own
            assert FLOAT64_TOLERANCE < row["diff"] <= row["tolerance"]
        else:
            assert row["diff"] <= row["tolerance"] == FLOAT64_TOLERANCE


def _params(path):
    import torch

    return torch.load(path, weights_only=True)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_killed_rank_resumes_to_the_same_parameters_bit_for_bit(tmp_path):
    common = ["--steps", "12", "--checkpoint-every", "4", *SMALL_BUCKETS]
    common += ["--allreduce", "recursive_doubling"]
    whole = tmp_path / "whole.pt"
    res, _ = _train(
        2, tmp_path, *common, "--checkpoint-dir", str(tmp_path / "a"), "--save-params", str(whole)
    )
    assert res.returncode == 0, res.stderr
    resumed = tmp_path / "resumed.pt"
    run = [*common, "--checkpoint-dir", str(tmp_path / "b"), "--save-params", str(resumed)]
    crash, _ = _train(2, tmp_path, *run, env={"OSU_DL_BENCH_TRAIN_FAULT": "1:6"}, name="x.json")
    assert crash.returncode != 0 and "exiting after step 6" in crash.stderr
    assert (tmp_path / "b" / "latest").read_text().strip() == "step-00000004"
    assert not resumed.exists()
    half_written = tmp_path / "b" / "step-00000008.partial"  # as a crash mid-save leaves it
    half_written.mkdir()
    (half_written / "rng-rank1.pt").write_bytes(b"stale")
    res, summary = _train(2, tmp_path, *run, "--resume")
    assert res.returncode == 0, res.stderr
    assert summary["start_step"] == 4 and "resumed after step 4" in res.stdout
    assert "removed 1 leftover(s) of an interrupted checkpoint save" in res.stdout
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [
        "latest",
        "step-00000008",
        "step-00000012",
    ]
    a, b = _params(whole), _params(resumed)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].equal(b[key]), key


def test_tuning_table_chooses_per_bucket_size(tmp_path):
    args = ["--steps", "4", *SMALL_BUCKETS, "--table", str(p2_train_table(tmp_path))]
    res, summary = _train(2, tmp_path, *args, "--fp16-compress", "--no-overlap")
    assert res.returncode == 0, res.stderr
    picks = {
        (b["dtype"], b["nbytes"] >= 65536, b["algorithm"], b["how"]) for b in summary["buckets"]
    }
    # fp16 halves the bytes: the fc bucket (131 KB) sends 65.5 KB, just above 64 KiB: ring.
    assert picks == {
        ("float16", True, "ring:seg=64K", "table"),
        ("float16", False, "recursive_doubling", "table"),
    }
    assert {b["algorithm"] for b in summary["bcasts"]} == {"chain:seg=256K"}
    assert "fp16 compression on" in res.stdout and "overlap off" in res.stdout


# Every rank records its exit code in a file, so "exit 2 on every rank" is checked, not
# assumed (mpiexec reports one code for the job; ranks' stdout lines may interleave).
_REPORTING = (
    "import os, sys\n{prelude}\nfrom osu_dl_bench.cli import main\n"
    "code = main(sys.argv[2:])\n"
    "with open(os.path.join(sys.argv[1], 'exit-' + os.environ['PMI_RANK']), 'w') as f:\n"
    "    f.write(str(code))\n"
    "raise SystemExit(code)"
)


@pytest.mark.parametrize(
    "nprocs,argv,prelude,message",
    [
        (2, ["--model", "vgg"], "", "invalid choice: 'vgg'"),
        (3, ["-b", "2"], "", "batch size 2 is smaller than the 3 ranks"),
        (2, ["--device", "cuda"], "sys.modules['cupy'] = None", "cupy is not installed"),
        (2, [], "sys.modules['torch'] = None", "pip install 'osu-dl-bench[train]'"),
        (2, ["--table", "TABLE"], "", "has no entry for bcast on cpu"),
        (2, ["--allreduce", "nosuch"], "", "unknown algorithm 'nosuch' for allreduce"),
        # Checked before training (rank 0 writes it), refused on every rank.
        (2, ["--json", "/proc/x.json"], "", "--json /proc/x.json: cannot create files in"),
    ],
)
def test_bad_input_exits_2_on_every_rank(tmp_path, nprocs, argv, prelude, message):
    table = p2_train_table(tmp_path, collectives=("allreduce",))
    argv = [str(table) if a == "TABLE" else a for a in argv]
    code = _REPORTING.format(prelude=prelude)
    run = ["-c", code, str(tmp_path), "train", "--steps", "2", *argv]
    res = run_mpi(nprocs, run, timeout=TIMEOUT)
    assert res.returncode == 2, res.stderr
    codes = {p.name: p.read_text() for p in tmp_path.glob("exit-*")}
    assert codes == {f"exit-{rank}": "2" for rank in range(nprocs)}
    assert message in res.stderr and res.stderr.count("osu-dl-bench: error") == 1


# The trainer's policy on GPU buffers (the strict cupy stand-in, whose "NCCL" is MPI): each
# rank writes what its session chose and why; NO_NCCL_ON names a rank whose NCCL is missing.
_GPU_POLICY = """
import os, sys
from mpi4py import MPI
from collectives import registry
registry.load_algorithms()
if str(MPI.COMM_WORLD.Get_rank()) == os.environ.get("NO_NCCL_ON"):
    for c in ("allreduce", "bcast", "bcast"):
        registry._REGISTRY.pop((c, "nccl"), None)
    registry.UNAVAILABLE_BACKENDS["nccl"] = "cupy has no NCCL"
from osu_dl_bench.train.comm_thread import CommThread
from osu_dl_bench.train.config import TrainConfig
from osu_dl_bench.train.session import Session
with CommThread() as thread:
    session = Session.open(MPI.COMM_WORLD, TrainConfig(buffers="cuda"), thread)
    label = thread.run(lambda: session.policy.choose("allreduce", 1 << 20).label)
    with open(os.path.join(sys.argv[1], f"policy-{session.rank}"), "w") as out:
        out.write(f"{label} | {session.policy.note}")
    session.close()
"""


@pytest.mark.parametrize(
    "devices,no_nccl_on,expected",
    [
        ("8", "", "nccl | "),
        ("2", "", "native | allreduce, bcast: staged native MPI, not nccl: nccl needs one GPU"),
        # One rank without NCCL: every rank falls back with it, none waits in NCCL's init.
        ("8", "1", "native | allreduce, bcast: staged native MPI, not nccl: rank 1: cupy has"),
    ],
)
def test_the_gpu_default_is_agreed_by_every_rank(tmp_path, devices, no_nccl_on, expected):
    env = {
        "PYTHONPATH": str(REPO / "tests" / "support" / "strict_cupy"),
        "OSU_DL_BENCH_CUDA_AWARE": "0",
        "STRICT_CUPY_DEVICES": devices,
        "NO_NCCL_ON": no_nccl_on,
    }
    res = run_mpi(3, ["-c", _GPU_POLICY, str(tmp_path)], timeout=TIMEOUT, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    chosen = [(tmp_path / f"policy-{rank}").read_text() for rank in range(3)]
    assert all(text.startswith(expected) for text in chosen), chosen
