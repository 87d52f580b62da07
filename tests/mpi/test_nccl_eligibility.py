"""Whether NCCL may run is one decision every rank of the job reaches together: a job whose
nodes see different GPU layouts falls back to MPI on every rank, with one reason naming
the node, instead of some ranks entering NCCL while the others wait in MPI. MIG instances
are refused for NCCL. Runs tests/drivers/nccl_agreement.py on the strict cupy stand-in;
MPICH's cliques (MPIR_CVAR_NUM_CLIQUES) stand for nodes: 5 ranks split 3 + 2."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys

from mpirun import MPIEXEC, REPO, mpi_env, run_with_timeout

STRICT_CUPY = REPO / "tests" / "support" / "strict_cupy"
DRIVER = str(REPO / "tests" / "drivers" / "nccl_agreement.py")

# The checkout ahead of any installed copy: the ranks must run this tree's code.
BASE = {
    "PYTHONPATH": os.pathsep.join([str(STRICT_CUPY), str(REPO)]),
    "OSU_DL_BENCH_CUDA_AWARE": "1",
}
RESULT = re.compile(r"RESULT (\{.*?\})(?=RESULT |\n|$)")


def _launch(parts: list[tuple[int, dict[str, str]]], **env: str) -> list[dict]:
    """``mpiexec -n A -env K V python DRIVER : -n B ...``; each rank's RESULT line."""
    cmd = [MPIEXEC]
    for i, (nprocs, own) in enumerate(parts):
        cmd += [":"] if i else []
        cmd += ["-n", str(nprocs)]
        for name, value in own.items():
            cmd += ["-env", name, value]
        cmd += [sys.executable, DRIVER]
    done = run_with_timeout(cmd, 90, mpi_env({**BASE, **env}))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Ranks' lines may arrive joined: each RESULT is read where it starts.
    results = [json.loads(found) for found in RESULT.findall(done.stdout)]
    return sorted(results, key=lambda r: r["rank"])


def _sum(nprocs: int) -> list[float]:
    return [float(nprocs * (nprocs + 1) // 2)] * 4


def test_nodes_that_judge_their_gpus_differently_all_fall_back_together():
    # Cliques of 3 and 2 ranks, 2 GPUs each: only the 3-rank node shares a GPU.
    results = _launch([(5, {})], MPIR_CVAR_NUM_CLIQUES="2", STRICT_CUPY_DEVICES="2")
    assert [r["ran"] for r in results] == ["native"] * 5
    assert len({r["reason"] for r in results}) == 1
    reason = results[0]["reason"]
    assert reason.startswith("on ") and "(rank 0)" in reason and "use the same GPU" in reason
    assert all(r["sum"] == _sum(5) for r in results)


def test_ranks_with_a_gpu_each_agree_on_nccl():
    # The control: the same job on one node with a GPU per rank runs NCCL everywhere (the
    # stand-in's NCCL, like NCCL, compares bus ids by host, so cliques cannot stand for
    # nodes here).
    results = _launch([(5, {})], STRICT_CUPY_DEVICES="5")
    assert [r["ran"] for r in results] == ["nccl"] * 5
    assert {r["reason"] for r in results} == {None}
    assert all(r["sum"] == _sum(5) for r in results)


def test_mig_instances_of_one_gpu_are_refused_for_nccl_on_every_rank():
    # Instances 0 and 1 of GPU 0 and instance 0 of GPU 1: two share a bus id.
    names = {place: name for name, place in fake_runtime_names().items()}
    parts = [
        (1, {"CUDA_VISIBLE_DEVICES": name}) for name in (names[0, 0], names[0, 1], names[1, 0])
    ]
    results = _launch(parts, STRICT_CUPY_MIG="2")
    assert [r["ran"] for r in results] == ["native"] * 3
    assert len({r["reason"] for r in results}) == 1
    assert "MIG" in results[0]["reason"]
    assert all(r["sum"] == _sum(3) for r in results)


def test_one_rank_on_a_mig_instance_refuses_nccl_for_the_whole_job():
    # Ranks 0 and 1 hold whole GPUs 0 and 1; rank 2 a MIG instance of GPU 3 (its own bus).
    name = next(n for n, place in fake_runtime_names().items() if place == (3, 0))
    parts = [(2, {}), (1, {"STRICT_CUPY_MIG": "2", "CUDA_VISIBLE_DEVICES": name})]
    results = _launch(parts)
    assert [r["ran"] for r in results] == ["native"] * 3
    assert len({r["reason"] for r in results}) == 1
    assert "(rank 2)" in results[0]["reason"] and name in results[0]["reason"]


def fake_runtime_names() -> dict[str, tuple[int, int]]:
    """The stand-in's MIG instance names on this host, two per GPU (its runtime module
    read alone: this process must not import the stand-in as cupy)."""
    path = STRICT_CUPY / "cupy" / "cuda" / "runtime.py"
    spec = importlib.util.spec_from_file_location("strict_cupy_runtime", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.mig_names(2)


def test_bench_on_nodes_that_judge_differently_skips_nccl_on_every_rank_and_says_why():
    bench = ["-m", "osu_dl_bench", "bench", "allreduce", "-d", "cuda", "-a", "native,nccl"]
    bench += ["-c", "-m", "8:64", "-i", "2", "-x", "1"]
    cmd = [MPIEXEC, "-n", "5", sys.executable, *bench]
    env = {**BASE, "MPIR_CVAR_NUM_CLIQUES": "2", "STRICT_CUPY_DEVICES": "2"}
    done = run_with_timeout(cmd, 120, mpi_env(env))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "# nccl: skipped: needs one GPU per rank" in done.stdout
    assert re.search(r"# nccl: on \S+ \(rank 0\): node-local ranks 0 and 2 use", done.stdout)
