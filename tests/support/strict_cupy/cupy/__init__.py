"""A strict stand-in for cupy, for machines without a GPU: put tests/support/strict_cupy on
PYTHONPATH and ``import cupy`` finds it.

It models what our code must get right about cupy (cupy/_core/core.pyx, cupy docs
"Interoperability" and "Streams"), and fails loudly where the real one would fail or race:

- ``ndarray`` is not a numpy subclass: it wraps host memory that stands for device
  memory. Its constructor takes a *shape* (``ndarray(values)`` is a bug); implicit
  conversion to numpy raises TypeError, as in cupy (use ``get``/``set``); numpy arrays are
  refused as operands of its kernels, as cupy refuses them.
- Kernels are asynchronous and run on the calling thread's current stream (see
  cuda/__init__.py for the ordering rules): every operation that runs a kernel (a ufunc,
  a copy, a setitem, ``zeros``, ``set``) marks the allocations it reads or writes as
  *pending* on that stream until a synchronisation that covers it (that stream's, or one
  ordered with it, or the device's). A kernel or a ``get`` on memory still pending on a
  stream that the current one is not ordered with raises ``UnsynchronizedAccess`` (two
  streams racing).
- MPI reaches a cupy array only through ``__cuda_array_interface__`` (mpi4py's path for
  GPU arrays). Reading it while the allocation is pending raises ``UnsynchronizedAccess``,
  the race a real GPU would hide; reading it at all where MPI is not CUDA-aware (unless
  ``OSU_DL_BENCH_CUDA_AWARE=1`` says the run's MPI is) raises it too ("UNSTAGED"), as a
  device pointer handed to such a library crashes it or reads garbage.
- ``set`` refuses another dtype or shape, as cupy's does (cupy/_core/core.pyx).
- ``cuda.nccl``: ``get_unique_id`` returns what cupy 14 returns, ``bytes`` (cupy PR #9438),
  or with ``STRICT_CUPY_VERSION=13`` cupy 13's tuple of 128 C chars, signed
  (``STRICT_CUPY_UNSIGNED_CHAR=1``: unsigned, as on ARM); ``NcclCommunicator`` takes
  exactly what that version gives. Its "NCCL" is MPI on COMM_WORLD ranks (cuda/nccl.py).
- Device memory: ``STRICT_CUPY_DEVICE_MEMORY`` bytes per device (default 16 GiB); live
  allocations count against it (``cuda.runtime.memGetInfo``), and one that does not fit
  raises ``cuda.memory.OutOfMemoryError``, as cupy's allocator does.
- ``cuda.runtime``: ``STRICT_CUPY_DEVICES`` devices (default 8; CUDA_VISIBLE_DEVICES
  narrows and renumbers them), each with a UUID fixed by host and physical index; any
  runtime call sets ``cuda.runtime.initialised`` (importing cupy initialises nothing).
"""

from __future__ import annotations

import numbers
import os
import sys
import weakref

import numpy as np

from . import cuda

__version__ = ("13.6.0" if os.environ.get("STRICT_CUPY_VERSION") == "13" else "14.0.0") + "+strict"
_MAX_NDIM = 64  # cupy's MAX_NDIM
float16, float32, float64 = np.float16, np.float32, np.float64
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64


class UnsynchronizedAccess(AssertionError):
    """MPI was handed device memory that a kernel may still be reading or writing."""


class _Allocation:
    """One device allocation; views share it. Counted against the device's memory
    (cuda.runtime.memGetInfo) while alive; one that does not fit raises cupy's
    OutOfMemoryError, as cudaMalloc fails."""

    __slots__ = ("__weakref__",)

    def __init__(self, nbytes: int = 0) -> None:
        free, total = cuda.runtime.memGetInfo()
        if nbytes > free:
            raise cuda.memory.OutOfMemoryError(nbytes, free, total)
        _device_held[id(self)] = nbytes
        weakref.finalize(self, _device_held.pop, id(self), None)


_device_held: dict[int, int] = {}  # id of a live allocation -> its bytes


def device_bytes_held() -> int:
    """Bytes of device memory the live allocations hold."""
    return sum(_device_held.values())


# id of an allocation -> the streams with kernels on it not yet synchronised
_pending: dict[int, list] = {}
_live: dict[int, _Allocation] = {}
violations: list[str] = []  # every unsynchronised or unstaged hand-over to MPI, for tests
CUDA_AWARE_ENV = "OSU_DL_BENCH_CUDA_AWARE"
UNSTAGED = "strict cupy: UNSTAGED: device memory handed to an MPI that is not CUDA-aware"
UNSYNCHRONIZED = (
    "strict cupy: UNSYNCHRONIZED ACCESS: device memory handed to MPI "
    "(__cuda_array_interface__) while a kernel queued on it is not synchronised"
)
RACE = "strict cupy: STREAM RACE: a kernel on one stream uses memory another stream is writing"


def _violation(message: str) -> None:
    # mpi4py probes for __cuda_array_interface__ in a way that swallows exceptions (then
    # says "expecting buffer"): the reason is also recorded and printed.
    violations.append(message)
    print(message, file=sys.stderr, flush=True)
    raise UnsynchronizedAccess(message)


def _check_ordered(array) -> None:
    current = cuda.get_current_stream()
    if any(not current.ordered_with(s) for s in _pending.get(id(array._alloc), ())):
        _violation(f"{RACE} ({current} after {_pending[id(array._alloc)]})")


def _mark(*arrays) -> None:
    current = cuda.get_current_stream()
    for array in arrays:
        if isinstance(array, ndarray):
            _check_ordered(array)
            streams = _pending.setdefault(id(array._alloc), [])
            if current not in streams:
                streams.append(current)
            _live[id(array._alloc)] = array._alloc


def _synchronize(stream=None) -> None:
    """Complete the kernels of ``stream`` and of the streams it is ordered with (None: of
    every stream, as a device synchronisation does)."""
    for key in list(_pending):
        left = [] if stream is None else [s for s in _pending[key] if not stream.ordered_with(s)]
        if left:
            _pending[key] = left
        else:
            del _pending[key]
            _live.pop(key, None)


def _mpi_reads_device_memory() -> bool:
    return os.environ.get(CUDA_AWARE_ENV, "").strip() == "1"


class _Pointer:
    def __init__(self, ptr: int):
        self.ptr = ptr


def _check_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    if isinstance(shape, np.ndarray) and shape.dtype.kind == "f":
        raise TypeError("ndarray(shape): shape must be integers, got a float array")
    dims = tuple(shape)
    if len(dims) > _MAX_NDIM:
        raise ValueError(f"maximum supported dimension for an ndarray is {_MAX_NDIM}")
    for d in dims:
        if not isinstance(d, numbers.Integral):
            raise TypeError(f"ndarray(shape): 'float' object cannot be a dimension: {d!r}")
    return tuple(int(d) for d in dims)


class ndarray:  # noqa: N801 - cupy's name
    """Device array: ``ndarray(shape, dtype=float)``, as cupy's constructor."""

    __array_priority__ = 100

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        self._a = np.empty(_check_shape(shape), dtype)
        self._alloc = _Allocation(self._a.nbytes)

    @classmethod
    def _wrap(cls, host: np.ndarray, alloc: _Allocation | None = None) -> ndarray:
        self = cls.__new__(cls)
        self._a = host
        self._alloc = _Allocation(host.nbytes) if alloc is None else alloc
        return self

    # --- attributes ---
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    ndim = property(lambda self: self._a.ndim)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)

    @property
    def data(self) -> _Pointer:
        return _Pointer(self._a.ctypes.data)

    def __len__(self) -> int:
        return len(self._a)

    def __repr__(self) -> str:
        return f"strict_cupy.ndarray({self._a!r})"

    # --- what cupy forbids ---
    def __array__(self, *args, **kwargs):
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. Please use `.get()` "
            "to construct a NumPy array explicitly."
        )

    def __iter__(self):
        raise TypeError("iterating a device array element by element (use .get())")

    def __bool__(self):
        raise TypeError("truth value of a device array (use .get())")

    # --- views and kernels ---
    def __getitem__(self, key) -> ndarray:
        # With an Ellipsis numpy returns a 0-d view, not a scalar, for an integer index.
        key = (*key, Ellipsis) if isinstance(key, tuple) else (key, Ellipsis)
        return ndarray._wrap(self._a[key], self._alloc)

    def __setitem__(self, key, value) -> None:
        self._a[key] = _operand(value)
        _mark(self, value)

    def view(self, dtype) -> ndarray:
        return ndarray._wrap(self._a.view(dtype), self._alloc)

    def reshape(self, *shape) -> ndarray:
        return ndarray._wrap(self._a.reshape(*shape), self._alloc)

    def ravel(self) -> ndarray:
        return self.reshape(-1)

    def copy(self) -> ndarray:
        out = ndarray._wrap(self._a.copy())
        _mark(self, out)
        return out

    def astype(self, dtype, copy=True) -> ndarray:
        out = ndarray._wrap(self._a.astype(dtype))
        _mark(self, out)
        return out

    def fill(self, value) -> None:
        self._a.fill(value)
        _mark(self)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":
            return NotImplemented
        args = [_operand(x) for x in inputs]
        outs = kwargs.pop("out", None)
        if outs is not None:
            outs = outs if isinstance(outs, tuple) else (outs,)
            for o in outs:
                if not isinstance(o, ndarray):
                    raise TypeError("cupy ufunc: out must be a cupy array")
            kwargs["out"] = tuple(o._a for o in outs)
        result = ufunc(*args, **kwargs)
        _mark(*inputs)
        if outs is not None:
            _mark(*outs)
            return outs[0] if len(outs) == 1 else outs
        wrapped = ndarray._wrap(np.asarray(result))
        _mark(wrapped)
        return wrapped

    def _binary(self, other, ufunc, reflected=False):
        return ufunc(other, self) if reflected else ufunc(self, other)

    __add__ = lambda self, o: self._binary(o, np.add)  # noqa: E731
    __radd__ = lambda self, o: self._binary(o, np.add, True)  # noqa: E731
    __sub__ = lambda self, o: self._binary(o, np.subtract)  # noqa: E731
    __mul__ = lambda self, o: self._binary(o, np.multiply)  # noqa: E731
    __truediv__ = lambda self, o: self._binary(o, np.true_divide)  # noqa: E731
    __eq__ = lambda self, o: self._binary(o, np.equal)  # noqa: E731
    __ne__ = lambda self, o: self._binary(o, np.not_equal)  # noqa: E731
    __hash__ = None

    # --- host transfers ---
    def get(self, stream=None, order="C", out=None, blocking=True) -> np.ndarray:
        """Device to host, ordered after the current stream's kernels (so memory pending
        there is fine; memory another, unordered stream is writing is a race)."""
        _check_ordered(self)
        if out is None:
            return self._a.copy()
        if not isinstance(out, np.ndarray) or out.shape != self._a.shape:
            raise ValueError("get(out=): out must be a numpy array of the same shape")
        out[...] = self._a
        return out

    def set(self, arr, stream=None) -> None:
        """Host to device, asynchronous (cudaMemcpyAsync) like cupy's."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, got {type(arr)}")
        if arr.dtype != self._a.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self._a.dtype} array")
        if arr.shape != self._a.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        if not self._a.flags.c_contiguous:
            raise RuntimeError("Cannot set to non-contiguous array")
        self._a[...] = arr
        _mark(self)

    # --- how mpi4py reaches device memory ---
    @property
    def __cuda_array_interface__(self) -> dict:
        if not _mpi_reads_device_memory():
            _violation(UNSTAGED)
        if id(self._alloc) in _pending:
            _violation(UNSYNCHRONIZED)
        return {
            "version": 2,
            "shape": self._a.shape,
            "typestr": self._a.dtype.str,
            "data": (self._a.ctypes.data if self._a.size else 0, False),
            "strides": None if self._a.flags.c_contiguous else self._a.strides,
        }


def _operand(value):
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, np.ndarray):
        raise TypeError("Unsupported type <class 'numpy.ndarray'> (host memory in a kernel)")
    return value


def zeros(shape, dtype=float) -> ndarray:
    out = ndarray(shape, dtype)
    out._a[...] = 0
    _mark(out)  # a memset kernel
    return out


def empty(shape, dtype=float) -> ndarray:
    return ndarray(shape, dtype)


def asnumpy(array, stream=None) -> np.ndarray:
    return array.get() if isinstance(array, ndarray) else np.asarray(array)


def asarray(array, dtype=None) -> ndarray:
    if isinstance(array, ndarray):
        return array if dtype is None else array.astype(dtype)
    host = np.asarray(array, dtype)
    out = ndarray(host.shape, host.dtype)
    out.set(host)
    return out


class ElementwiseKernel:
    """cupy.ElementwiseKernel(in_params, out_params, operation, name): only the copy
    ``y = x`` can run here (nothing compiles CUDA); a type placeholder binds to the first
    argument's dtype and every argument of that type must have it, as cupy checks
    (cupy/_core/_kernel.pyx); arguments must be cupy arrays of one shape; the launch is
    asynchronous on the current stream, like every kernel."""

    def __init__(self, in_params: str, out_params: str, operation: str, name: str = "kernel"):
        self.ins = [p.split() for p in in_params.split(",")]
        self.outs = [p.split() for p in out_params.split(",")]
        if len(self.ins) != 1 or len(self.outs) != 1 or any(len(p) != 2 for p in self.ins):
            raise NotImplementedError("strict cupy: only one input and one output are modelled")
        (_, x), (_, y) = self.ins[0], self.outs[0]
        if operation.replace(" ", "").rstrip(";") != f"{y}={x}":
            raise NotImplementedError(f"strict cupy: cannot run {operation!r}, only '{y} = {x}'")
        self.name = name

    def __call__(self, *args):
        if len(args) != 2:
            raise TypeError(f"Wrong number of arguments for {self.name!r}: expected 2")
        source, target = args
        for arg in args:
            if not isinstance(arg, ndarray):
                raise TypeError(f"Unsupported type {type(arg)} (host memory in a kernel)")
        types = {self.ins[0][0]: source.dtype}
        if self.outs[0][0] in types and types[self.outs[0][0]] != target.dtype:
            raise TypeError(f"Type is mismatched. {self.name} T {source.dtype} {target.dtype}")
        if source.shape != target.shape:
            raise ValueError(f"{self.name}: shapes {source.shape} and {target.shape} differ")
        _check_ordered(source)
        target._a[...] = source._a
        _mark(source, target)
        return target


def get_array_module(*arrays):
    return __import__(__name__) if any(isinstance(a, ndarray) for a in arrays) else np


__all__ = [
    "cuda",
    "ndarray",
    "zeros",
    "empty",
    "asnumpy",
    "asarray",
    "ElementwiseKernel",
    "UnsynchronizedAccess",
]
