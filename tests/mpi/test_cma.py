"""The single-copy (Linux CMA) algorithms' kernel interface, availability check and costs.
Their results on p = 1..6 are checked with every other algorithm, and on registered buffers,
where they read peers' mappings, in the SPMD tier (tests/spmd: test_algorithms_multirank,
test_shm_hierarchical, test_cma)."""

import pytest
from support.interpreter import run_python

from collectives import cma

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
    result = run_python(_PRCTL_SPY, str(tmp_path / "ptrace_scope"))
    assert "PRCTL before cma 0\n" in result.stderr
    assert f"PRCTL after cma 1 {cma._PR_SET_PTRACER}\n" in result.stderr  # once per process
