"""The single-copy (Linux CMA) algorithms' kernel interface, availability check and costs.
Their results on p = 1..6 are checked with every other algorithm (test_algorithms_multirank,
test_shm_hierarchical); here also on registered buffers, where they read peers' mappings."""

import errno
import os
import sys

import numpy as np
import pytest
from mpi4py import MPI

from collectives import cma, registered, shm
from collectives.buffers import array_module
from collectives.common import LinkCost, Machine
from osu_dl_bench.errors import UsageError

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


@needs_cma
@pytest.mark.parametrize(("scope", "calls"), [("0", 0), ("1", 1), (None, 0)])
def test_binding_cma_sets_the_ptracer_only_under_yama_scope_1(tmp_path, monkeypatch, scope, calls):
    scope_file = tmp_path / "ptrace_scope"
    if scope is not None:
        scope_file.write_text(scope + "\n")
    made = []
    monkeypatch.setattr(cma, "_PTRACE_SCOPE", scope_file)
    monkeypatch.setattr(cma, "_PTRACER_SET", False)
    monkeypatch.setattr(cma, "_set_ptracer_any", lambda: made.append(1) or 0)
    cma.allreduce(MPI.COMM_SELF)
    cma.bcast(MPI.COMM_SELF)
    assert len(made) == calls


@needs_cma
def test_a_refused_prctl_fails_the_bind_with_its_reason(tmp_path, monkeypatch):
    scope_file = tmp_path / "ptrace_scope"
    scope_file.write_text("1\n")
    monkeypatch.setattr(cma, "_PTRACE_SCOPE", scope_file)
    monkeypatch.setattr(cma, "_PTRACER_SET", False)
    monkeypatch.setattr(cma, "_set_ptracer_any", lambda: errno.EINVAL)
    with pytest.raises(UsageError, match=r"PR_SET_PTRACER_ANY\) failed: Invalid argument"):
        cma.allreduce(MPI.COMM_SELF)


needs_registered = pytest.mark.skipif(
    registered.unavailable_reason() is not None,
    reason=f"registered buffers unavailable: {registered.unavailable_reason()}",
)


@needs_registered
def test_registered_arrays_know_their_region_and_offset():
    array = registered.zeros(1000, np.float32)
    assert array.dtype == np.float32 and array.shape == (1000,) and not array.any()
    region, offset = registered.region_of(array)
    assert offset == 0 and region.nbytes == 4000
    assert registered.region_of(array[10:20])[1] == 40
    assert registered.region_of(array[::2]) is None  # not contiguous: no single block
    assert registered.region_of(np.zeros(10)) is None  # private memory
    assert registered.ARRAYS.zeros(3, np.int64).tolist() == [0, 0, 0]
    assert registered.region_of(array_module("cpu-registered").zeros(5, np.int32)) is not None
    grid = registered.ones((3, 4), np.int8)
    assert grid.shape == (3, 4) and grid.sum() == 12 and registered.region_of(grid) is not None
    with pytest.raises(ValueError, match="non-negative integer sizes, got -1"):
        registered.empty(-1)


@needs_registered
def test_a_region_is_released_with_its_last_array():
    import gc

    array = registered.empty(256, np.float64)
    region, _ = registered.region_of(array)
    view = array[5:]
    del array
    gc.collect()
    assert registered.region_of(view) is not None  # a view keeps the memory
    del view
    gc.collect()
    assert region.serial not in registered._REGIONS
    with pytest.raises(OSError):
        os.fstat(region.fd)  # the memory file is closed


@needs_registered
def test_peer_maps_see_the_same_memory_or_answer_none():
    array = registered.zeros(64, np.int64)
    region, _ = registered.region_of(array)
    maps = registered.PeerMaps(limit=1)
    raw = maps.bytes_of(os.getpid(), region.fd, region.serial)
    array[3] = 42
    assert raw.view(np.int64)[3] == 42  # a second mapping of the same pages
    assert maps.bytes_of(os.getpid(), 10_000, 1) is None  # no such descriptor
    assert maps.last_error.startswith(f"/proc/{os.getpid()}/fd/10000: ")
    assert maps.bytes_of(os.getpid(), region.fd, region.serial) is not raw  # limit 1: remapped


@needs_registered
def test_registered_memory_cannot_shrink_or_grow():
    """Sealed: a peer that opens the file through /proc cannot truncate it under the owner
    (whose next load would die with SIGBUS)."""
    array = registered.zeros(1000, np.float64)
    region, _ = registered.region_of(array)
    peer = os.open(f"/proc/{os.getpid()}/fd/{region.fd}", os.O_RDWR)  # as a peer would
    try:
        for fd in (region.fd, peer):
            for size in (0, region.nbytes - 8, region.nbytes + 4096):
                with pytest.raises(PermissionError) as caught:
                    os.ftruncate(fd, size)
                assert caught.value.errno == errno.EPERM
    finally:
        os.close(peer)
    assert os.fstat(region.fd).st_size == region.nbytes
    array[-1] = 7.0  # still mapped and whole
    assert array[-1] == 7.0


@needs_registered
def test_peer_mappings_are_read_only_unless_asked_writable():
    array = registered.zeros(16, np.int64)
    region, _ = registered.region_of(array)
    maps = registered.PeerMaps()
    seen = maps.bytes_of(os.getpid(), region.fd, region.serial)
    assert not seen.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        seen.view(np.int64)[0] = 1
    with pytest.raises(TypeError):
        seen.base[0] = 1  # the mmap itself refuses stores
    written = maps.bytes_of(os.getpid(), region.fd, region.serial, writable=True)
    written.view(np.int64)[2] = 9
    assert array[2] == 9 and seen.view(np.int64)[2] == 9
