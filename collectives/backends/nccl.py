"""``nccl``: NVIDIA NCCL through cupy.cuda.nccl, on GPU (cupy) buffers. Kept thin.

- allreduce ``nccl`` and bcast ``nccl``: ncclAllReduce / ncclBcast on one NCCL
  communicator per MPI communicator, built from a unique id that rank 0 makes
  (ncclGetUniqueId) and broadcasts over MPI (ncclCommInitRank on every rank).
- bcast ``nccl_hierarchical``, the seed design (Awan et al., PPoPP 2017): NCCL
  inside a node, MPI across nodes among the node leaders (collectives.topology.split_nodes,
  so ``--ranks-per-node`` emulation applies):
    1. on the root's node, NCCL bcast from the root;
    2. the leaders bcast from the root's node with MPI_Bcast, staged through pinned host
       memory (collectives.device.PinnedMirrors; mpi4py cannot ask whether the MPI library
       is CUDA-aware, staging is always right);
    3. on every other node, NCCL bcast from the leader.

Every call waits for its stream, so it is blocking like an MPI call and can be timed alike.
bcast moves bytes (ncclUint8), so it takes every dtype. Each process uses the GPU chosen at
start from its node-local rank (collectives.device.select_local_gpu), which also finds
ranks sharing a GPU by device UUID; NCCL needs one GPU per rank. The unique id goes over
MPI with ``comm.bcast`` exactly as cupy returns it.

NCCL's algorithm and protocol are parameters: ``nccl:algo=ring|tree,proto=simple|ll|ll128``
for allreduce, ``nccl:proto=simple|ll|ll128`` for bcast (NCCL's broadcast has only the ring
algorithm: src/device/broadcast.h); ``auto`` (the default, the plain label ``nccl``) leaves
the choice to NCCL. They are forced through NCCL's environment, NCCL_ALGO and NCCL_PROTO
(NCCL docs, "Environment Variables"), which NCCL reads when a communicator is initialised
(ncclTopoTuneModel, src/graph/tuning.cc): so each forced variant gets a communicator of its
own, created while the variables are set, and the environment is restored after. A sweep
tries NCCL's own choice and the six forced pairs. At p = 1 NCCL runs no algorithm at all
(ncclLaunchOneRank, src/enqueue.cc: one cudaMemcpyAsync), so the choice shows only on
several GPUs.

Constraints: GPU (cuda) buffers; at most one rank per GPU of a node, whole GPUs (no MIG
instances: they share a PCI bus id, which NCCL compares); allreduce only on
NCCL's types (float16/32/64, int8, uint8, int32, uint32, int64, uint64: no int16) and ops
(sum, prod, max, min: no bitwise ops). Cost: not modelled (``cost=None``): NCCL picks its
own algorithm and protocol (src/graph/tuning.cc), so it is measured.

Registered only where cupy imports, a CUDA device is present and cupy has NCCL; otherwise
``registry.UNAVAILABLE_BACKENDS['nccl']`` says why. Sources: cupy_backends/cuda/libs/nccl.pyx
(get_unique_id returns ncclUniqueId's 128 bytes as ``bytes`` from cupy 14, cupy PR #9438;
in cupy 13 as a tuple of their ``char`` values, whose sign follows the platform's char;
NcclCommunicator takes what get_unique_id gave), the NCCL API documentation
(ncclCommInitRank, ncclAllReduce, ncclBcast).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives.backends import cached_on_comm
from collectives.buffers import cuda_unavailable_reason
from collectives.device import (
    PinnedMirrors,
    expected_sharing_reason,
    gpu_sharing_reason,
    selected_gpu,
)
from collectives.errors import UsageError
from collectives.registry import (
    GPU_BUFFERS,
    SEVERAL_NODES,
    UNAVAILABLE_BACKENDS,
    Algorithm,
    CallContext,
    Requirement,
    Variant,
    register,
)
from collectives.topology import NodeComms, split_nodes

if TYPE_CHECKING:
    from mpi4py import MPI

BACKEND = "nccl"
CUPY_MISSING = "cupy is not installed (pip install 'osu-dl-bench[cuda]')"
# numpy dtype name -> cupy.cuda.nccl constant (ncclDataType_t); NCCL has no 16-bit integer.
NCCL_DTYPES = {
    "float16": "NCCL_FLOAT16",
    "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64",
    "int8": "NCCL_INT8",
    "uint8": "NCCL_UINT8",
    "int32": "NCCL_INT32",
    "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64",
    "uint64": "NCCL_UINT64",
}
# Our op name -> cupy.cuda.nccl constant (ncclRedOp_t).
NCCL_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}
# NCCL's own choice of algorithm or protocol: the variable is left as it is.
AUTO = "auto"
# Our parameter values -> NCCL's names in NCCL_ALGO and NCCL_PROTO (NCCL docs, "Environment
# Variables"; NCCL parses them case-insensitively).
NCCL_ALGOS = {"ring": "Ring", "tree": "Tree"}
NCCL_PROTOS = {"simple": "Simple", "ll": "LL", "ll128": "LL128"}
# Each parameter: its NCCL variable and the values it takes.
_SETTINGS = {"algo": ("NCCL_ALGO", NCCL_ALGOS), "proto": ("NCCL_PROTO", NCCL_PROTOS)}
# Launchers' node-local rank variables (MPICH Hydra, Open MPI, Slurm): read without MPI calls,
# since a bind may happen on a sub-communicator only.
_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")

NCCL_DTYPE = Requirement(
    "needs a dtype NCCL reduces (float16/32/64, int8, uint8, int32, uint32, int64, uint64)",
    lambda c: c.etype.name in NCCL_DTYPES,
)
NCCL_OP = Requirement(
    "needs an op NCCL has (sum, prod, max, min)", lambda c: c.op is None or c.op.name in NCCL_OPS
)


def unavailable_reason() -> str | None:
    """None if cupy, a CUDA device and NCCL are usable here, else why not (cupy is looked up
    before it is imported, so a machine without it pays nothing)."""
    if importlib.util.find_spec("cupy") is None:
        return CUPY_MISSING
    reason = cuda_unavailable_reason()
    if reason:
        return reason
    try:
        from cupy.cuda import nccl
    except ImportError as exc:
        return f"cupy has no NCCL: {exc}"
    return None if getattr(nccl, "available", False) else "cupy was built without NCCL"


def _distinct_gpus(ctx: CallContext) -> bool:
    # Found by device UUID and bus id when the GPU was chosen, and agreed by every rank of
    # the job (collectives.device.select_local_gpu), so no rank enters NCCL while another
    # falls back; counting visible devices would refuse one visible GPU per rank
    # (--gpus-per-task=1).
    # A process that chose none (a sweep's one-process planner) predicts that choice from
    # the job's shape, or it would plan an nccl group that the job then refuses.
    if selected_gpu() is not None:
        return gpu_sharing_reason() is None
    return expected_sharing_reason(ctx.ppn) is None


ONE_GPU_PER_RANK = Requirement(
    "needs one GPU per rank (ranks of a node share a GPU, or use MIG instances)", _distinct_gpus
)


def _use_local_device() -> None:
    """The GPU chosen at start (select_local_gpu); where no command chose one, GPU
    ``launcher's local rank % device count``, without MPI calls since a bind may happen on
    a sub-communicator only."""
    import cupy

    if selected_gpu() is not None:
        cupy.cuda.Device(selected_gpu()).use()
        return
    for var in _LOCAL_RANK_VARS:
        value = os.environ.get(var, "")
        if value.isdigit():
            cupy.cuda.Device(int(value) % cupy.cuda.runtime.getDeviceCount()).use()
            return


# --- the NCCL communicator, one per MPI communicator ---


def _new_nccl_comm(comm: MPI.Comm) -> Any:
    """ncclCommInitRank over the ranks of ``comm`` (collective over ``comm``)."""
    from cupy.cuda import nccl

    _use_local_device()
    rank = comm.Get_rank()
    # The id goes over as cupy gives it (cupy 14: bytes; cupy 13: a tuple of 128 C chars,
    # signed on x86, unsigned on ARM) and is handed back unchanged; converting it (e.g.
    # through int8) would break one version or one platform.
    uid = comm.bcast(nccl.get_unique_id() if rank == 0 else None, root=0)
    return nccl.NcclCommunicator(comm.Get_size(), uid, rank)


def nccl_environment(params: Mapping[str, str]) -> dict[str, str]:
    """NCCL's variables that force ``params`` (algo, proto; 'auto' sets nothing), e.g.
    {'NCCL_ALGO': 'Ring', 'NCCL_PROTO': 'LL'}."""
    settings = {}
    for name, value in params.items():
        variable, names = _SETTINGS[name]
        if value != AUTO:
            settings[variable] = names[value]
    return settings


@contextlib.contextmanager
def _environment(settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` in os.environ (so in the C library's getenv) while inside; every
    variable set back (or removed) after, whatever happens inside."""
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def nccl_communicator(comm: MPI.Comm, settings: Mapping[str, str] | None = None) -> Any:
    """The NCCL communicator of ``comm`` under NCCL ``settings`` (nccl_environment), created
    on first use (collectively, with the settings in the environment) and cached."""
    if not settings:
        return cached_on_comm(comm, BACKEND, _new_nccl_comm)

    def create(c: MPI.Comm) -> Any:
        with _environment(settings):
            return _new_nccl_comm(c)

    key = ",".join(f"{name}={value}" for name, value in sorted(settings.items()))
    return cached_on_comm(comm, f"{BACKEND}:{key}", create)


def _stream() -> Any:
    import cupy

    return cupy.cuda.get_current_stream()


# --- the algorithms ---


def allreduce(comm: MPI.Comm, algo: str = AUTO, proto: str = AUTO) -> Callable:
    """Bind ncclAllReduce (in place when ``send`` is None) under NCCL algorithm ``algo``
    and protocol ``proto`` ('auto': NCCL's choice)."""
    from cupy.cuda import nccl

    nc = nccl_communicator(comm, nccl_environment({"algo": algo, "proto": proto}))
    dtypes = {name: getattr(nccl, const) for name, const in NCCL_DTYPES.items()}
    ops = {name: getattr(nccl, const) for name, const in NCCL_OPS.items()}

    def call(send, recv, op, root):
        if recv.size == 0:
            return  # nothing to reduce; an empty array has no device pointer
        src = recv if send is None else send
        stream = _stream()
        nc.allReduce(
            src.data.ptr,
            recv.data.ptr,
            recv.size,
            dtypes[recv.dtype.name],
            ops[op.name],
            stream.ptr,
        )
        stream.synchronize()

    return call


def bcast(comm: MPI.Comm, proto: str = AUTO) -> Callable:
    """Bind ncclBcast on the bytes of ``recv`` under NCCL protocol ``proto`` ('auto':
    NCCL's choice)."""
    from cupy.cuda import nccl

    nc = nccl_communicator(comm, nccl_environment({"proto": proto}))

    def call(send, recv, op, root):
        if recv.nbytes == 0:
            return
        stream = _stream()
        nc.bcast(recv.data.ptr, recv.nbytes, nccl.NCCL_UINT8, root, stream.ptr)
        stream.synchronize()

    return call


def _rank_places(comm: MPI.Comm, nodes: NodeComms) -> np.ndarray:
    """Row r: (node index, local rank) of rank r of ``comm``."""
    mine = np.array([nodes.node, nodes.local.Get_rank()], dtype=np.int64)
    places = np.empty((comm.Get_size(), 2), dtype=np.int64)
    comm.Allgather(mine, places)
    return places


def hierarchical_bcast(comm: MPI.Comm) -> Callable:
    """Bind the two-level bcast: NCCL inside nodes, MPI among node leaders."""
    from cupy.cuda import nccl

    nodes = split_nodes(comm)
    local = nccl_communicator(nodes.local)
    places = _rank_places(comm, nodes)
    staging = PinnedMirrors()  # pinned: copies at full speed, not through a bounce buffer

    def leaders_step(recv_bytes: Any, on_root_node: bool, root_node: int, stream: Any) -> None:
        host = staging.mirror(recv_bytes)
        if on_root_node:
            stream.synchronize()  # step 1 must have landed before it is read
            recv_bytes.get(out=host)
        nodes.leaders.Bcast(host, root_node)  # leader rank among leaders = node index
        if not on_root_node:
            recv_bytes.set(host, stream=stream)

    def call(send, recv, op, root):
        if recv.nbytes == 0:
            return
        root_node, root_local = (int(x) for x in places[root])
        on_root_node = nodes.node == root_node
        recv_bytes, stream = recv.view(np.uint8), _stream()
        if on_root_node:
            local.bcast(recv.data.ptr, recv.nbytes, nccl.NCCL_UINT8, root_local, stream.ptr)
        if nodes.is_leader and nodes.nodes > 1:
            leaders_step(recv_bytes, on_root_node, root_node, stream)
        if not on_root_node:
            local.bcast(recv.data.ptr, recv.nbytes, nccl.NCCL_UINT8, 0, stream.ptr)
        stream.synchronize()

    return call


_SUMMARY = "NCCL through cupy.cuda.nccl"


@dataclasses.dataclass(frozen=True)
class NcclAlgorithm(Algorithm):
    """``nccl`` with NCCL's algorithm and protocol as parameters. A parameter left at
    'auto' is not shown, so NCCL's own choice keeps the plain label 'nccl' that tables and
    run directories use; the sweep's grid is NCCL's own choice plus every forced pair."""

    def variant(self, **params: int | str) -> Variant:
        """``nccl``, ``nccl:proto=ll`` or ``nccl:algo=ring,proto=ll``: the 'auto' ones
        left out."""
        bound = super().variant(**params)
        forced = {name: value for name, value in bound.params.items() if value != AUTO}
        return Variant(self, MappingProxyType(forced))

    def grid_variants(self) -> list[Variant]:
        """NCCL's own choice first, then every forced combination of the grid."""
        return [self.variant(), *super().grid_variants()]


def _check_settings(params: Mapping[str, int | str]) -> None:
    for name, value in params.items():
        names = _SETTINGS[name][1]
        if value != AUTO and value not in names:
            raise UsageError(
                f"nccl:{name}={value}: expected {AUTO} (NCCL's choice) or one of {', '.join(names)}"
            )


def _tunable(*names: str) -> dict[str, Any]:
    """Registration fields of an nccl algorithm whose parameters ``names`` (algo, proto)
    are forced through NCCL's environment."""
    return {
        "algorithm_class": NcclAlgorithm,
        "grid": {name: tuple(_SETTINGS[name][1]) for name in names},
        "check_params": _check_settings,
    }


def register_backend() -> None:
    """Register the nccl algorithms if cupy, a GPU and NCCL are present, else say why not."""
    reason = unavailable_reason()
    if reason:
        UNAVAILABLE_BACKENDS[BACKEND] = reason
        return
    gpu = (GPU_BUFFERS, ONE_GPU_PER_RANK)
    register(
        "allreduce",
        "nccl",
        backend=BACKEND,
        summary=_SUMMARY,
        requires=(*gpu, NCCL_DTYPE, NCCL_OP),
        **_tunable("algo", "proto"),
    )(allreduce)
    register("bcast", "nccl", backend=BACKEND, summary=_SUMMARY, requires=gpu, **_tunable("proto"))(
        bcast
    )
    register(
        "bcast",
        "nccl_hierarchical",
        backend=BACKEND,
        summary="NCCL inside a node, MPI across node leaders (Awan et al.)",
        requires=(*gpu, SEVERAL_NODES),
    )(hierarchical_bcast)


register_backend()
