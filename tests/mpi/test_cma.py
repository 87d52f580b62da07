"""The single-copy (Linux CMA) algorithms' kernel interface, availability check and costs.
Their results on p = 1..6 are checked with every other algorithm (test_algorithms_multirank,
test_shm_hierarchical); here also on registered buffers, where they read peers' mappings."""

import subprocess
import sys

import pytest
from mpirun import REPO, driver_summary, run_mpi

from collectives import cma, registered

DRIVER = "tests/drivers/check_algorithms.py"
needs_cma = pytest.mark.skipif(
    cma.unavailable_reason() is not None, reason=f"cma unavailable: {cma.unavailable_reason()}"
)


# Counts the process's prctl calls made through ctypes (as cma makes them) while it
# imports the package, runs `list` and binds non-cma algorithms under ptrace_scope 1; then
# binds cma, which must call it (the spy answers 0 instead of calling prctl).
_PRCTL_SPY = """
import ctypes, sys
calls = []
original = ctypes.CDLL.__getitem__
def spy(self, name):
    if name != "prctl":
        return original(self, name)
    return lambda *args: calls.append(args) or 0
ctypes.CDLL.__getitem__ = spy
from osu_dl_bench import cli
from collectives import cma, native, shm
from mpi4py import MPI
cli.main(["list"])
scope = open(sys.argv[1], "w"); scope.write("1\\n"); scope.close()
cma._PTRACE_SCOPE = cma.Path(sys.argv[1])
shm.allreduce(MPI.COMM_SELF)
shm.bcast(MPI.COMM_SELF)
print("PRCTL before cma", len(calls), file=sys.stderr)
cma.allreduce(MPI.COMM_SELF)
cma.bcast(MPI.COMM_SELF)
print("PRCTL after cma", len(calls), calls[0][0] if calls else None, file=sys.stderr)
"""


@needs_cma
def test_only_binding_cma_calls_prctl(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _PRCTL_SPY, str(tmp_path / "ptrace_scope")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PRCTL before cma 0\n" in result.stderr
    assert f"PRCTL after cma 1 {cma._PR_SET_PTRACER}\n" in result.stderr  # once per process


needs_registered = pytest.mark.skipif(
    registered.unavailable_reason() is not None,
    reason=f"registered buffers unavailable: {registered.unavailable_reason()}",
)


@needs_cma
@needs_registered
@pytest.mark.parametrize("nprocs", [2, 3])
def test_host_algorithms_on_registered_and_mixed_buffers(nprocs):
    """Every host algorithm on registered buffers, with rank 1 on private memory (cma then
    mixes mapped loads and kernel copies), sizes up to > 1 MiB not divisible by p."""
    args = [DRIVER, "--backends", "mpi", "--collectives", "allreduce,bcast", "--device"]
    args += ["cpu-registered", "--private-ranks", "1", "--dtypes", "float32,int64"]
    args += ["--ops", "sum,max", "--sizes", "0,1,13,4099,1048579"]
    summary = driver_summary(run_mpi(nprocs, args, timeout=300))
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0


@needs_cma
@needs_registered
def test_cma_on_registered_buffers_never_copies_through_the_kernel():
    args = [DRIVER, "--algorithms", "cma", "--collectives", "allreduce,bcast", "--device"]
    args += ["cpu-registered", "--forbid-kernel-copies", "--dtypes", "float32,int64,float16"]
    args += ["--ops", "sum,max", "--sizes", "0,1,13,4099,262147"]
    result = run_mpi(3, args, timeout=300)
    summary = driver_summary(result)
    assert "cannot map registered buffers" not in result.stderr  # the bind-time probe mapped
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0 and summary["skipped"] == 0
