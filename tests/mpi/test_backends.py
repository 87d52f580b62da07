"""The gloo and nccl backends: correctness under real mpiexec, the bench CLI, availability.
gloo's results on every dtype and op are checked in the SPMD tier (tests/spmd/test_backends.py).

gloo runs wherever torch is installed (CI installs torch==2.13.0). nccl needs cupy and a
GPU: its correctness tests run wherever both exist and are skipped with the reason
elsewhere; on CPU its algorithms also run on a stand-in for cupy whose "NCCL" is MPI, which
checks our layouts, roots and node logic but not cupy or NCCL themselves.

Run as a script (``python tests/mpi/test_backends.py``, under mpiexec) this file is the device
correctness driver: every registered nccl algorithm on cupy buffers against the expected
result, ending with one ``SUMMARY {json}`` line from rank 0.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import sys
from pathlib import Path

import pytest
from mpirun import driver_summary, mpi_env, run_cli, run_mpi
from support.interpreter import run_python

THIS = str(Path(__file__).resolve())
TORCH_MISSING = "torch is not installed: gloo tests need pip install torch==2.13.0 (CPU build)"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason=TORCH_MISSING)


# Binds gloo on a sub-communicator and on COMM_WORLD, frees the first right after a call
# and exits right after the last one: with no barrier before teardown, a rank that leaves
# while its peers are still inside the collective made Gloo abort them, in about half the runs.
EXIT_SCRIPT = """
import numpy as np
from osu_dl_bench.runtime.start import init_mpi
MPI = init_mpi()
from collectives import lookup
from collectives.ops import reduce_op
world = MPI.COMM_WORLD
half = world.Split(world.Get_rank() % 2, world.Get_rank())
x = np.ones(1 << 16, np.float32)
for comm in (half, world):
    call = lookup("allreduce", "gloo").variant().bind(comm)
    for _ in range(20):
        x[:] = 1
        call(None, x, reduce_op("sum"), 0)
    assert x[0] == comm.Get_size(), x[0]
    if comm is half:
        half.Free()
print("done", flush=True)
"""


@needs_torch
def test_gloo_teardown_is_clean_when_exiting_right_after_a_call():
    for _ in range(3):
        res = run_mpi(4, ["-c", EXIT_SCRIPT], timeout=120)
        assert res.returncode == 0 and res.stdout.count("done") == 4, res.stdout + res.stderr
        assert "terminate called" not in res.stderr, res.stderr


def _tables(stdout: str) -> dict[str, list[list[str]]]:
    """Rows of each '# Algorithm: NAME' table of a bench run."""
    tables: dict[str, list[list[str]]] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("# Algorithm:"):
            current = tables.setdefault(line.split()[2], [])
        elif current is not None and line and not line.startswith("#"):
            current.append(line.split())
    return tables


@needs_torch
def test_bench_validates_native_and_gloo():
    args = ["bench", "allreduce", "-a", "native,gloo", "-c", "-m", "4:64K", "-i", "10", "-x", "2"]
    res = run_cli(2, args)
    assert res.returncode == 0, res.stderr
    tables = _tables(res.stdout)
    assert set(tables) == {"native", "gloo"}, res.stdout
    sizes = [4 << k for k in range(15)]
    for name, rows in tables.items():
        assert [int(r[0]) for r in rows] == sizes, (name, res.stdout)
        assert all(r[-1] == "Pass" for r in rows), (name, res.stdout)


@needs_torch
def test_bench_skips_gloo_for_a_dtype_it_cannot_reduce():
    res = run_cli(2, ["bench", "allreduce", "-a", "native,gloo", "-T", "int16", "-m", "8", "-c"])
    assert res.returncode == 0, res.stderr
    assert "# gloo: skipped: needs a dtype Gloo reduces" in res.stdout
    assert set(_tables(res.stdout)) == {"native"}


# --- availability, as `osu-dl-bench list` reports it ---


def _list_output(hide: str | None = None) -> str:
    """`osu-dl-bench list` in a fresh process, with module ``hide`` made unimportable."""
    script = "import sys\n"
    if hide:
        # A None entry in sys.modules makes find_spec (and import) fail for that module.
        script += f"sys.modules[{hide!r}] = None\n"
    script += "from osu_dl_bench.cli import main\nsys.exit(main(['list']))\n"
    return run_python(script, env=mpi_env()).stdout


def _rows_of_backend(listing: str, backend: str) -> list[str]:
    return [ln for ln in listing.splitlines() if ln.split()[2:3] == [backend]]


def test_list_reports_nccl_availability():
    from collectives.backends import nccl

    listing = _list_output()
    reason = nccl.unavailable_reason()
    if reason is None:
        assert _rows_of_backend(listing, "nccl"), listing
    else:
        assert f"backend nccl: not available here: {reason}" in listing
        assert not _rows_of_backend(listing, "nccl")


def test_list_reports_gloo_unavailable_without_torch():
    from collectives.backends import gloo

    listing = _list_output(hide="torch")
    assert f"backend gloo: not available here: {gloo.TORCH_MISSING}" in listing
    assert not _rows_of_backend(listing, "gloo")


# The collectives torch.distributed's Gloo implements (a new collective needs no gloo call).
GLOO_COLLECTIVES = {
    "allreduce",
    "bcast",
    "reduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "gather",
    "scatter",
    "barrier",
}


@needs_torch
def test_list_names_gloo_for_every_collective_gloo_has_when_torch_is_installed():
    listing = _list_output()
    collectives = {ln.split()[0] for ln in _rows_of_backend(listing, "gloo")}
    assert collectives == GLOO_COLLECTIVES
    assert "backend gloo" not in listing


# --- nccl: on GPUs where present, and on the MPI stand-in for cupy everywhere ---


def _assert_all_passed(summary: dict) -> None:
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0


def _nccl_unavailable() -> str | None:
    from collectives.backends import nccl

    return nccl.unavailable_reason()


def _gpu_count() -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def _run_device_driver(nprocs: int, ranks_per_node: int | None, env=None) -> dict:
    extra = {"OSU_DL_BENCH_RANKS_PER_NODE": str(ranks_per_node)} if ranks_per_node else {}
    return driver_summary(run_mpi(nprocs, [THIS], timeout=300, env={**extra, **(env or {})}))


@pytest.mark.parametrize("ranks_per_node", [None, 1])
def test_nccl_matches_expected_on_gpus(ranks_per_node):
    reason = _nccl_unavailable()
    if reason:
        pytest.skip(f"nccl backend not available here: {reason}")
    # One rank per GPU; emulated one-rank nodes send the hierarchical bcast across "nodes".
    nprocs = max(1, min(_gpu_count(), 4))
    _assert_all_passed(_run_device_driver(nprocs, ranks_per_node))


# The strict stand-in for cupy (tests/support/strict_cupy): device arrays that are not numpy
# arrays, MPI refused memory a kernel has not finished with, and an "NCCL" over MPI that
# takes cupy's tuple unique id.
STRICT_CUPY = Path(__file__).resolve().parents[1] / "support" / "strict_cupy"


@pytest.fixture
def fake_cupy() -> dict[str, str]:
    """Environment whose ``import cupy`` finds the strict stand-in."""
    return {"PYTHONPATH": os.pathsep.join([str(STRICT_CUPY), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("nprocs,ranks_per_node", [(1, None), (3, None), (4, 2), (3, 2)])
def test_nccl_algorithms_on_a_cupy_stand_in(fake_cupy, nprocs, ranks_per_node):
    summary = _run_device_driver(nprocs, ranks_per_node, env=fake_cupy)
    _assert_all_passed(summary)
    assert summary["algorithms"] == ["allreduce/nccl", "bcast/nccl", "bcast/nccl_hierarchical"]


# --- the device correctness driver (this file run as a script under mpiexec) ---

DEVICE_DTYPES = ("float32", "float64", "float16", "int32", "int64", "uint8")
DEVICE_OPS = ("sum", "prod", "max", "min")
DEVICE_SIZES = (0, 1, 7, 13, 1000, 4099)


def _device_cases(spec, nprocs: int):
    ops = DEVICE_OPS if spec.reduces else (None,)
    roots = range(nprocs) if spec.rooted else (0,)
    return itertools.product(DEVICE_DTYPES, ops, DEVICE_SIZES, roots, (False, True))


def _check_device_algorithm(comm, algo, topo) -> tuple[int, int, list[str]]:
    """Run one algorithm over every case on cupy buffers: (passed, skipped, failures)."""
    import cupy

    from collectives import SPECS, CallContext, CallShape
    from collectives.dtypes import element_type
    from collectives.ops import reduce_op
    from osu_dl_bench.measurement.kernel import count_wrong

    spec, variant = SPECS[algo.collective], algo.variant()
    call, nprocs = variant.bind(comm), comm.Get_size()
    passed = skipped = 0
    failures = []
    for dtype, op_name, n, root, in_place in _device_cases(spec, nprocs):
        etype, op = element_type(dtype), op_name and reduce_op(op_name)
        if variant.ineligible_reason(CallContext(nprocs, etype, op, "cuda", topo.nodes, topo.ppn)):
            skipped += 1
            continue
        shape = CallShape(n, nprocs, comm.Get_rank(), root, in_place)
        bufs = spec.allocate(cupy, etype.dtype, shape)
        spec.fill(bufs, shape, op)
        call(bufs.send, bufs.recv, op, root)
        output = spec.output(bufs, shape)
        expected = spec.expected(shape, etype.dtype, op)
        wrong = 0 if output is None else count_wrong(output, expected, etype)
        if comm.allreduce(wrong):
            failures.append(
                f"{algo.collective}/{algo.name} dtype={dtype} op={op_name} n={n} "
                f"root={root} in_place={in_place}"
            )
        else:
            passed += 1
    return passed, skipped, failures


def _device_driver_main() -> int:
    from osu_dl_bench.runtime.start import init_mpi

    MPI = init_mpi("single")
    from collectives import all_algorithms
    from collectives.registry import UNAVAILABLE_BACKENDS
    from osu_dl_bench.runtime.topology import discover_topology

    comm = MPI.COMM_WORLD
    assert "nccl" not in UNAVAILABLE_BACKENDS, UNAVAILABLE_BACKENDS["nccl"]
    topo = discover_topology(comm)
    algos = [a for a in all_algorithms() if a.backend == "nccl"]
    totals = {"passed": 0, "skipped": 0, "failed": 0, "failures": []}
    for algo in algos:
        passed, skipped, failures = _check_device_algorithm(comm, algo, topo)
        totals["passed"] += passed
        totals["skipped"] += skipped
        totals["failed"] += len(failures)
        totals["failures"] += failures[:20]
    totals["algorithms"] = [f"{a.collective}/{a.name}" for a in algos]
    if comm.Get_rank() == 0:
        print("SUMMARY " + json.dumps(totals), flush=True)
    return 0


if __name__ == "__main__":
    from osu_dl_bench.runtime.guard import run_guarded

    sys.exit(run_guarded(_device_driver_main))
