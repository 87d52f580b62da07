"""The single-copy (Linux CMA) algorithms on registered buffers, where they read peers'
mappings (SPMD: one job per p; the kernel interface is checked in tests/mpi/test_cma.py)."""

import pytest

from collectives import cma, registered

needs_cma = pytest.mark.skipif(
    cma.unavailable_reason() is not None, reason=f"cma unavailable: {cma.unavailable_reason()}"
)
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
    from drivers import check_algorithms

    args = ["--backends", "mpi", "--collectives", "allreduce,bcast", "--device"]
    args += ["cpu-registered", "--private-ranks", "1", "--dtypes", "float32,int64"]
    args += ["--ops", "sum,max", "--sizes", "0,1,13,4099,1048579"]
    summary = check_algorithms.check_with(args)
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0


@needs_cma
@needs_registered
@pytest.mark.parametrize("nprocs", [3])
def test_cma_on_registered_buffers_never_copies_through_the_kernel(nprocs, capfd, monkeypatch):
    from drivers import check_algorithms

    # The probe warns once per process: an earlier test of this job may have warned.
    monkeypatch.setattr(cma, "_MAPPING_WARNED", False)

    args = ["--algorithms", "cma", "--collectives", "allreduce,bcast", "--device"]
    args += ["cpu-registered", "--forbid-kernel-copies", "--dtypes", "float32,int64,float16"]
    args += ["--ops", "sum,max", "--sizes", "0,1,13,4099,262147"]
    summary = check_algorithms.check_with(args)
    # The bind-time probe mapped (it says so on stderr where it cannot).
    assert "cannot map registered buffers" not in capfd.readouterr().err
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0 and summary["skipped"] == 0
