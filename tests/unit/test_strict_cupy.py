"""The strict cupy stand-in itself (tests/support/strict_cupy): it must fail where a GPU
would race or refuse, or the GPU-path tests that run on it prove nothing."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from mpi4py import MPI


def _on_thread(fn):
    """fn() on a new thread; its result, or its exception re-raised here."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as error:  # handed back to the test
            out["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _refused(cupy, array, word: str) -> None:
    """MPI is handed ``array`` and refused it for ``word`` (mpi4py reports the refusal as
    a TypeError, the stand-in records why)."""
    with pytest.raises(TypeError):
        MPI.COMM_SELF.Bcast(array, 0)
    assert word in cupy.violations[-1]


def test_each_thread_starts_on_the_legacy_default_stream(cupy):
    mine = cupy.cuda.Stream(non_blocking=True).use()
    assert cupy.cuda.get_current_stream() is mine
    assert _on_thread(cupy.cuda.get_current_stream) is cupy.cuda.Stream.null


def test_a_non_blocking_stream_does_not_wait_for_the_null_streams_kernels(cupy):
    array = cupy.zeros(4, np.float32)  # a memset on the null stream, not synchronised
    other = cupy.cuda.Stream(non_blocking=True)
    other.synchronize()
    _refused(cupy, array, "UNSYNCHRONIZED")
    with other, pytest.raises(cupy.UnsynchronizedAccess, match="STREAM RACE"):
        array.get()


def test_the_null_stream_is_ordered_with_blocking_streams_only(cupy):
    blocking, non_blocking = cupy.cuda.Stream(), cupy.cuda.Stream(non_blocking=True)
    with blocking:
        a = cupy.zeros(2, np.int32)
    with non_blocking:
        b = cupy.zeros(2, np.int32)
    cupy.cuda.Stream.null.synchronize()
    MPI.COMM_SELF.Bcast(a, 0)
    _refused(cupy, b, "UNSYNCHRONIZED")
    non_blocking.synchronize()
    MPI.COMM_SELF.Bcast(b, 0)


def test_mpi_that_is_not_cuda_aware_cannot_read_device_memory(plain_mpi):
    array = plain_mpi.zeros(2, np.int32)
    plain_mpi.cuda.Device().synchronize()
    _refused(plain_mpi, array, "UNSTAGED")


def test_set_refuses_another_dtype_as_cupy_does(cupy):
    array = cupy.zeros(3, np.float32)
    with pytest.raises(TypeError, match="float64 array cannot be set to float32 array"):
        array.set(np.zeros(3))
    array.set(np.ones(3, np.float32))


@pytest.mark.parametrize("version,kind", [("14", bytes), ("13", tuple)])
def test_the_nccl_id_is_what_that_cupy_version_gives(cupy, monkeypatch, version, kind):
    from cupy.cuda import nccl

    monkeypatch.setenv("STRICT_CUPY_VERSION", version)
    uid = nccl.get_unique_id()
    assert type(uid) is kind and len(uid) == nccl.UNIQUE_ID_BYTES
    assert len(nccl._id_bytes(uid)) == nccl.UNIQUE_ID_BYTES
    foreign = tuple(uid) if kind is bytes else bytes(c % 256 for c in uid)
    with pytest.raises(TypeError):
        nccl._id_bytes(foreign)


def test_the_stand_ins_nccl_knows_nccls_algorithm_and_protocol_names(cupy):
    from cupy.cuda import nccl

    assert nccl._enabled("NCCL_ALGO", None) == set(nccl.ALGORITHMS)
    assert nccl._enabled("NCCL_ALGO", "Ring,TREE") == {"ring", "tree"}
    assert nccl._enabled("NCCL_PROTO", "^LL128") == {"ll", "simple"}
    for variable, value in [("NCCL_ALGO", "Bogus"), ("NCCL_PROTO", "ll,fast"), ("NCCL_ALGO", "")]:
        with pytest.raises(nccl.NcclError, match="INVALID_USAGE"):
            nccl._enabled(variable, value)
