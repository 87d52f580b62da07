"""The gloo backend equals the expected result on every dtype and op Gloo supports (SPMD:
one job per p; the command line, availability and nccl are checked in
tests/mpi/test_backends.py)."""

import importlib.util

import pytest

TORCH_MISSING = "torch is not installed: gloo tests need pip install torch==2.13.0 (CPU build)"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason=TORCH_MISSING)
LARGE = str(4 * 1024 * 1024 + 3)  # > 16 MiB of float32, not divisible by any p here


def _assert_all_passed(summary: dict) -> None:
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0


@needs_torch
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_gloo_matches_expected_on_every_dtype_and_op(nprocs):
    from drivers import check_algorithms

    # Beyond the whole-registry run of test_algorithms_multirank: the dtypes and ops whose
    # support differs in Gloo (int8/uint8 reduce, bitwise ops; int16/uint64 reduce only as
    # skips, yet move as bytes).
    args = ["--algorithms", "gloo", "--dtypes", "float16,float32,int8,uint8,int16,int32,uint64"]
    args += ["--ops", "sum,prod,max,min,band,bor,bxor", "--sizes", "0,1,7,1000"]
    summary = check_algorithms.check_with(args)
    _assert_all_passed(summary)
    # int16 and uint64 reductions are declared unsupported, so they are skipped, not run.
    assert summary["skipped"] > 0


@needs_torch
@pytest.mark.parametrize("nprocs", [3])
def test_gloo_large_messages_match_expected(nprocs):
    from drivers import check_algorithms

    args = ["--algorithms", "gloo", "--collectives", "allreduce,bcast,reduce"]
    args += ["--dtypes", "float32", "--ops", "sum", "--sizes", LARGE]
    _assert_all_passed(check_algorithms.check_with(args))
