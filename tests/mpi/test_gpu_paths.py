"""The GPU path under mpiexec on the strict cupy stand-in (tests/support/strict_cupy): the
MPI algorithms on device buffers (CUDA-aware MPI), bench -d cuda -c with and without host
staging, a short -d cuda sweep, NCCL's unique id as ARM's unsigned chars give it, and, on
an MPI that is not CUDA-aware: sweep -> tune -> bench -a tuned, and latency/bw, each rank
on its own GPU.

The stand-in fails a run that hands MPI memory a kernel has not finished with, or device
memory at all where MPI is not CUDA-aware (OSU_DL_BENCH_CUDA_AWARE=0), fills only through
``set``, and refuses NCCL ids that are not what that cupy version gives.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from mpirun import (
    REPO,
    driver_summary,
    mpi_env,
    run_cli,
    run_cli_cases,
    run_mpi,
    run_with_timeout,
)

from osu_dl_bench.measurement.store import RunStore

STRICT_CUPY = REPO / "tests" / "support" / "strict_cupy"
DRIVER = "tests/drivers/check_algorithms.py"
STAGING = "MPI algorithms stage through pinned host buffers"
TABLE_ON_ANOTHER_PATH = "was measured with MPI staged through host memory; here MPI is reading"


def _env(cuda_aware: bool, **extra: str) -> dict[str, str]:
    return {
        # The checkout after the stand-in, ahead of any installed copy of the package.
        "PYTHONPATH": os.pathsep.join([str(STRICT_CUPY), str(REPO)]),
        "OSU_DL_BENCH_CUDA_AWARE": "1" if cuda_aware else "0",
        **extra,
    }


def _rows(stdout: str) -> list[list[str]]:
    return [ln.split() for ln in stdout.splitlines() if ln and not ln.startswith("#")]


@pytest.mark.parametrize("nprocs", [2, 3])
def test_every_algorithm_is_right_on_device_buffers(nprocs):
    args = [DRIVER, "--device", "cuda", "--dtypes", "float32,float16,int32"]
    args += ["--ops", "sum,prod,max", "--sizes", "0,1,13,1000,4099"]
    summary = driver_summary(run_mpi(nprocs, args, timeout=300, env=_env(True)))
    assert summary["failed"] == 0, summary["failures"]
    assert summary["passed"] > 0


@pytest.mark.parametrize(
    "cupy_id", [{}, {"STRICT_CUPY_VERSION": "13", "STRICT_CUPY_UNSIGNED_CHAR": "1"}]
)
def test_nccl_takes_the_unique_id_as_cupy_13_on_arm_and_cupy_14_give_it(cupy_id):
    args = [DRIVER, "--device", "cuda", "--backends", "nccl", "--collectives", "allreduce"]
    args += ["--dtypes", "float32", "--ops", "sum", "--sizes", "13"]
    summary = driver_summary(run_mpi(2, args, timeout=120, env=_env(True, **cupy_id)))
    assert summary["failed"] == 0 and summary["passed"] > 0, summary


def _device_bench_case(collective: str) -> list[str]:
    argv = ["bench", collective, "-d", "cuda", "-a", "all", "-c", "-m", "8:16K"]
    return [*argv, "-i", "3", "-x", "1"]


@pytest.fixture(scope="module")
def device_bench_runs(tmp_path_factory):
    """(nprocs, cuda_aware, collective) -> its device bench: both collectives in one job
    per (nprocs, cuda_aware), started by the first test that asks for one of them."""
    runs: dict[tuple, subprocess.CompletedProcess] = {}

    def run(nprocs: int, cuda_aware: bool, collective: str) -> subprocess.CompletedProcess:
        if (nprocs, cuda_aware, collective) not in runs:
            cases = [_device_bench_case(name) for name in ("allreduce", "bcast")]
            tmp = tmp_path_factory.mktemp("device_bench")
            done = run_cli_cases(nprocs, cases, timeout=240, tmp=tmp, env=_env(cuda_aware))
            runs.update({(nprocs, cuda_aware, res.args[1]): res for res in done})
        return runs[nprocs, cuda_aware, collective]

    return run


@pytest.mark.parametrize("nprocs,cuda_aware", [(2, False), (3, True)])
@pytest.mark.parametrize("collective", ["allreduce", "bcast"])
def test_bench_on_device_buffers_validates_every_algorithm(
    nprocs, cuda_aware, collective, device_bench_runs
):
    res = device_bench_runs(nprocs, cuda_aware, collective)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = _rows(res.stdout)
    assert rows and all(row[-1] == "Pass" for row in rows)
    assert "Backend: nccl" in res.stdout and "Backend: mpi" in res.stdout
    assert res.stdout.count(STAGING) == (0 if cuda_aware else 1)


def test_sweep_on_device_buffers(tmp_path):
    run_dir = tmp_path / "run"
    argv = ["sweep", "--inside", "--np", "2,3", "--collectives", "allreduce", "-m", "8:64"]
    argv += ["-d", "cuda", "--budget", "0.02", "--launches", "1", "-o", str(run_dir)]
    res = run_cli(3, argv, timeout=300, env=_env(True))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    frame = RunStore(run_dir).load()
    assert set(frame["nprocs"]) == {2, 3}
    assert {"nccl", "mpi"} <= set(frame["backend"])


def test_a_sweep_with_more_ranks_than_gpus_plans_no_nccl_group(tmp_path):
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "osu_dl_bench", "sweep", "--np", "2", "-d", "cuda"]
    argv += ["--collectives", "allreduce", "-m", "8:64", "--budget", "0.02", "--launches", "1"]
    env = mpi_env(_env(False, STRICT_CUPY_DEVICES="1"))  # two ranks share the one GPU
    res = run_with_timeout([*argv, "-o", str(run_dir)], 300, env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    frame = RunStore(run_dir).load()
    assert set(frame["backend"]) == {"mpi"} and set(frame["validation"]) == {"pass"}


# The CLI on an MPI library that is not CUDA-aware: with OSU_DL_BENCH_CUDA_AWARE=0 the
# stand-in fails a device array handed to MPI (mpi4py reaches it through
# __cuda_array_interface__; the stand-in's NCCL uses raw pointers), as a real non-CUDA-aware
# MPI would crash on a device pointer. Each rank prints (to stderr, apart from rank 0's
# rows) the GPU it used last.
UNSTAGED = "strict cupy: UNSTAGED"
CLI_ON_PLAIN_MPI = """
import sys
import cupy
from mpi4py import MPI

rank = MPI.COMM_WORLD.Get_rank()
from osu_dl_bench.cli import main
code = main(sys.argv[1:])
print(f"GPU rank {rank} device {cupy.cuda.Device._current}", file=sys.stderr, flush=True)
raise SystemExit(code)
"""


def _run_plain(nprocs: int, argv: list[str], cuda_aware: bool, timeout: float = 300):
    res = run_mpi(nprocs, ["-c", CLI_ON_PLAIN_MPI, *argv], timeout=timeout, env=_env(cuda_aware))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert UNSTAGED not in res.stderr and "UNSYNCHRONIZED" not in res.stderr, res.stderr[-3000:]
    return res


def _gpus(stderr: str) -> dict[int, int]:
    """rank -> the GPU index it used, from CLI_ON_PLAIN_MPI's lines (ranks' output may
    interleave, so found anywhere)."""
    return {int(r): int(d) for r, d in re.findall(r"GPU rank (\d+) device (\d+)", stderr)}


def test_sweep_tune_and_tuned_bench_stage_where_mpi_is_not_cuda_aware(tmp_path):
    run_dir, table = tmp_path / "run", tmp_path / "t.json"
    argv = ["sweep", "--inside", "--np", "2", "--collectives", "allreduce", "-m", "8:4K"]
    argv += ["-d", "cuda", "--budget", "0.02", "--launches", "1", "-o", str(run_dir)]
    swept = _run_plain(2, argv, cuda_aware=False)
    frame = RunStore(run_dir).load()
    assert set(frame["validation"]) == {"pass"}
    assert set(frame["device"]) == {"cuda"} and {"nccl", "mpi"} <= set(frame["backend"])
    assert _gpus(swept.stderr) == {0: 0, 1: 1}
    metadata = RunStore(run_dir).read_metadata()
    assert metadata["mpi_cuda"] == "staged" and metadata["gpu_model"] == "Strict fake GPU"
    assert metadata["mpi_cuda_source"] == "OSU_DL_BENCH_CUDA_AWARE=0"
    res = run_cli(1, ["tune", str(run_dir), "-o", str(table)], timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert json.loads(table.read_text())["measured_with"]["mpi_cuda"] == "staged"
    argv = ["bench", "allreduce", "-d", "cuda", "-a", "tuned", "--table", str(table), "-c"]
    argv += ["-m", "8:4K", "-i", "3", "-x", "1"]
    tuned = _run_plain(2, argv, cuda_aware=False)
    rows = _rows(tuned.stdout)
    assert rows and all(row[-1] == "Pass" for row in rows)
    assert _gpus(tuned.stderr) == {0: 0, 1: 1}
    assert TABLE_ON_ANOTHER_PATH not in tuned.stderr
    # The table measured staged, used where MPI reads device memory: one line says so.
    direct = _run_plain(2, [*argv, "-o", str(tmp_path / "r.json")], cuda_aware=True)
    assert direct.stderr.count(TABLE_ON_ANOTHER_PATH) == 1, direct.stderr[-3000:]
    record = json.loads((tmp_path / "r.json").read_text())[0]
    assert record["mpi_cuda"] == "direct" and record["cuda_runtime"] == "12.4"


@pytest.mark.parametrize("benchmark", ["latency", "bw"])
@pytest.mark.parametrize("cuda_aware", [True, False])
def test_point_to_point_on_device_buffers_uses_a_gpu_per_rank(benchmark, cuda_aware):
    argv = ["bench", benchmark, "-d", "cuda", "-c", "-m", "1:4K", "-i", "3", "-x", "1"]
    res = _run_plain(2, argv, cuda_aware)
    rows = _rows(res.stdout)
    assert rows and all(row[-1] == "Pass" for row in rows)
    assert _gpus(res.stderr) == {0: 0, 1: 1}
    assert res.stdout.count(STAGING) == (0 if cuda_aware else 1)


def test_host_device_copies_are_timed_each_way_with_an_interval(tmp_path):
    out = tmp_path / "copies.json"
    args = ["scripts/gpu_host_device.py", "-m", "1K:64K", "--json", str(out)]
    result = run_mpi(1, args, timeout=120, env=_env(False, STRICT_CUPY_DEVICES="1"))
    assert result.returncode == 0, result.stderr
    figures = json.loads(out.read_text())
    assert sorted(figures, key=int) == ["1024", "4096", "16384", "65536"]
    for row in figures.values():
        assert set(row) == {"h2d pinned", "d2h pinned", "h2d pageable", "d2h pageable"}
        for copy in row.values():
            assert copy["gbs_low"] <= copy["gbs"] <= copy["gbs_high"]
            assert copy["iterations"] == 100
    assert "h2d pageable" in result.stdout


def test_host_device_copies_refuse_a_bad_size_range():
    result = run_mpi(1, ["scripts/gpu_host_device.py", "-m", "4K:1K"], timeout=60, env=_env(False))
    assert result.returncode == 2
    assert "minimum size" in result.stderr


@pytest.mark.parametrize(
    "case,settings,words",
    [
        ("json", {}, "directory {tmp}/nodir does not exist"),
        ("device", {"STRICT_CUPY_DEVICE_MEMORY": str(1 << 20)}, "of device memory on each rank"),
        # cudaHostAlloc fails past the locked-memory limit: 1K and 4K fit, 16K does not.
        ("pinned", {"STRICT_CUPY_PINNED_LIMIT": str(8 << 10)}, "-m: 16K: cannot allocate"),
    ],
)
def test_host_device_copies_end_with_one_message_on_every_rank_keeping_what_was_measured(
    tmp_path, case, settings, words
):
    out = tmp_path / ("nodir/x.json" if case == "json" else "copies.json")
    sizes = "1M:4M" if case == "device" else "1K:64K"
    args = ["scripts/gpu_host_device.py", "-m", sizes, "--json", str(out)]
    result = run_mpi(2, args, timeout=120, env=_env(False, STRICT_CUPY_DEVICES="2", **settings))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("gpu_host_device: ") == 1
    assert words.format(tmp=tmp_path) in result.stderr, result.stderr
    measured = [row[0] for row in _rows(result.stdout)]
    assert measured == (["1024", "4096"] if case == "pinned" else [])
    if case == "pinned":
        assert sorted(json.loads(out.read_text()), key=int) == measured
    else:
        assert not out.exists()


def test_bench_refuses_a_message_the_gpus_cannot_hold_on_every_rank():
    # 256 MiB float32 messages, checked: send, recv and their copies, 1 GiB per rank; the
    # stand-in's GPUs have 512 MiB.
    env = _env(True, STRICT_CUPY_DEVICE_MEMORY=str(512 << 20))
    argv = ["bench", "allreduce", "-d", "cuda", "-c", "-m", "256M:256M", "-i", "1", "-x", "0"]
    res = run_cli(3, argv, timeout=120, env=env)
    assert res.returncode != 0
    output = res.stdout + res.stderr
    assert "of device memory on each rank" in output, output[-3000:]
    assert "OutOfMemoryError" not in output  # refused before anything was allocated
    assert "1.0 GiB" in output and "0.5 GiB" in output


@pytest.mark.parametrize("nprocs", [2, 3])
def test_a_staged_rooted_collective_copies_only_where_it_reads_and_writes(nprocs):
    roots = sorted({0, 1, nprocs - 1})
    driver = "tests/drivers/staged_copies.py"
    args = [driver, ",".join(map(str, roots))]
    results = driver_summary(run_mpi(nprocs, args, timeout=120, env=_env(False)))
    assert len(results) == 2 * 2 * len(roots)
    for result in results:
        root, copies = result["root"], result["copies"]
        assert result["wrong"] == 0, result
        for rank, counted in enumerate(copies):
            if result["collective"] == "bcast":
                # The root's buffer goes to the host, the others' comes back: one copy each.
                expected = {"get": 1, "set": 0} if rank == root else {"get": 0, "set": 1}
            else:  # reduce: every send to the host, the result back on the root alone
                expected = {"get": 1, "set": 1 if rank == root else 0}
            assert counted == expected, (result, rank)


STAGED_BCAST_ROOTS = ["fixed:2", "rotate"]


def _staged_bcast_case(root: str) -> list[str]:
    argv = ["bench", "bcast", "-d", "cuda", "-a", "all", "--bounds", "-c", "-k", root]
    return [*argv, "-m", "8:4K", "-i", "3", "-x", "1"]


@pytest.fixture(scope="module")
def staged_bcast_runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """root option -> the staged bcast bench with its bounds, both in one job at 3 ranks."""
    cases = [_staged_bcast_case(root) for root in STAGED_BCAST_ROOTS]
    tmp = tmp_path_factory.mktemp("staged_bcast")
    done = run_cli_cases(3, cases, timeout=240, tmp=tmp, env=_env(False))
    return dict(zip(STAGED_BCAST_ROOTS, done, strict=True))


@pytest.mark.parametrize("root", STAGED_BCAST_ROOTS)
def test_staged_bcast_with_its_bounds_in_the_same_rounds_still_validates(root, staged_bcast_runs):
    res = staged_bcast_runs[root]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    tables = ["# OSU MPI" + t for t in res.stdout.split("# OSU MPI")[1:]]
    candidates = [t for t in tables if "Backend: bound" not in t]
    assert candidates and all(row[-1] == "Pass" for t in candidates for row in _rows(t) if row), (
        res.stdout[-3000:]
    )
    for name in ("memcpy", "copy-kernel", "staging"):
        assert f"# Algorithm: {name}  Backend: bound" in res.stdout


def test_a_garbage_cuda_aware_override_stops_every_rank_with_one_message():
    env = {**_env(True), "OSU_DL_BENCH_CUDA_AWARE": "yes"}
    argv = ["bench", "allreduce", "-d", "cuda", "-c", "-m", "8:64", "-i", "1", "-x", "0"]
    res = run_cli(2, argv, timeout=120, env=env)
    assert res.returncode == 2, res.stdout[-3000:] + res.stderr[-3000:]
    assert res.stderr.count("OSU_DL_BENCH_CUDA_AWARE='yes': expected 1") == 1, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
