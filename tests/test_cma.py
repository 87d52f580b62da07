"""The single-copy (Linux CMA) algorithms' kernel interface, availability check and costs.
Their results on p = 1..6 are checked with every other algorithm (test_algorithms_multirank,
test_shm_hierarchical)."""

import os
import sys

import numpy as np
import pytest

from osu_dl_bench.collectives import cma, shm
from osu_dl_bench.collectives.common import LinkCost, Machine

MACHINE = Machine(LinkCost(1e-6, 1e-10, 1e-10), LinkCost(5e-6, 1e-9, 1e-10), ppn=4)
needs_cma = pytest.mark.skipif(
    cma.unavailable_reason() is not None, reason=f"cma unavailable: {cma.unavailable_reason()}"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CMA is Linux's")
@pytest.mark.parametrize(("scope", "available"), [("0", True), ("1", True), ("2", False)])
def test_ptrace_scope_decides_availability(tmp_path, monkeypatch, scope, available):
    scope_file = tmp_path / "ptrace_scope"
    scope_file.write_text(scope + "\n")
    monkeypatch.setattr(cma, "_PTRACE_SCOPE", scope_file)
    reason = cma.unavailable_reason()
    assert (reason is None) == available, reason
    if not available:
        assert "ptrace_scope=2" in reason


@needs_cma
def test_kernel_copies_both_ways_within_a_process():
    kernel = cma.Kernel()
    source = np.arange(100_003, dtype=np.float64)
    target = np.zeros_like(source)
    kernel.read(os.getpid(), source.ctypes.data, target)
    assert np.array_equal(target, source)
    target[:] = 0
    kernel.write(os.getpid(), target.ctypes.data, source)
    assert np.array_equal(target, source)


@needs_cma
def test_kernel_error_names_the_call_and_the_pid():
    with pytest.raises(OSError, match=rf"process_vm_readv from pid {os.getpid()}"):
        cma.Kernel().read(os.getpid(), 8, np.empty(4, np.uint8))  # address 8: unmapped


def test_cma_moves_half_the_bytes_of_shm():
    n = 1 << 24
    # Same link: shm copies in, reduces and copies the whole result out; cma reads 2(p-1)/p.
    assert cma.allreduce_cost(MACHINE, 2, n) < shm.allreduce_cost(MACHINE, 2, n)
    assert cma.bcast_cost(MACHINE, 2, n) < shm.bcast_cost(MACHINE, 2, n)
    assert cma.allreduce_cost(MACHINE, 1, n) == cma.bcast_cost(MACHINE, 1, n) == 0.0


@needs_cma
def test_a_refused_self_read_makes_cma_unavailable(monkeypatch):
    def refuse(self, pid, remote, local):
        raise OSError(1, "process_vm_readv from pid 1: Operation not permitted")

    monkeypatch.setattr(cma.Kernel, "read", refuse)
    reason = cma.unavailable_reason()
    assert reason is not None and "refuses process_vm_readv" in reason
