"""cupy.cuda.nccl of the strict stand-in: an "NCCL" whose communicator is MPI.

ncclCommInitRank is emulated with MPI_Comm_create_group, collective over the members only,
as ncclCommInitRank is: the members find each other's world ranks through a directory
named after the unique id (a rendezvous on this host's file system).
The unique id is what cupy gives (cupy_backends/cuda/libs/nccl.pyx): in cupy 14 the 128
bytes of ncclUniqueId as ``bytes`` (cupy PR #9438), in cupy 13 (STRICT_CUPY_VERSION=13) a
tuple of their 128 ``char`` values, signed by default, unsigned with
STRICT_CUPY_UNSIGNED_CHAR=1 (ARM). NcclCommunicator(ndev, commId, rank) takes only what
that version gives, and refuses two ranks on one GPU as NCCL does ("Duplicate GPU
detected").

NCCL_ALGO and NCCL_PROTO are read when a communicator is created, as ncclCommInitRank does
(src/graph/tuning.cc): each communicator keeps the values it saw in ``settings`` (and
``CREATED`` lists every communicator's, in creation order, for tests); a name NCCL does not
know fails there on more than one rank (NCCL 2.28 on one rank runs no tuning model and took
NCCL_ALGO=Bogus without a word, on an H200), and a broadcast on a communicator whose
NCCL_ALGO leaves out Ring (NCCL's only broadcast algorithm) fails when called on more than
one rank, as NCCL's enqueue finds no algorithm ("no algorithm/protocol available"). Lists
(``Ring,Tree``) and NCCL's ``^`` (all but) are understood; the per-collective form
(``allreduce:tree``) is not modelled.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

available = True
UNIQUE_ID_BYTES = 128
TYPES = [
    np.int8,
    np.uint8,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]
(
    NCCL_INT8,
    NCCL_UINT8,
    NCCL_INT32,
    NCCL_UINT32,
    NCCL_INT64,
    NCCL_UINT64,
    NCCL_FLOAT16,
    NCCL_FLOAT32,
    NCCL_FLOAT64,
) = range(9)
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN = range(4)


class NcclError(RuntimeError):
    pass


# NCCL's names (case-insensitive) for NCCL_ALGO and NCCL_PROTO (NCCL docs, "Environment
# Variables").
ALGORITHMS = ("ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
SETTING_NAMES = {"NCCL_ALGO": ALGORITHMS, "NCCL_PROTO": PROTOCOLS}
# The settings every communicator saw when it was created, in creation order.
CREATED: list[dict[str, str | None]] = []


def _enabled(variable: str, value: str | None) -> set[str]:
    """The names a NCCL_ALGO or NCCL_PROTO value enables (all when unset); an unknown name
    fails as ncclCommInitRank does."""
    known = SETTING_NAMES[variable]
    if value is None:
        return set(known)
    text = value.strip().lower()
    negate = text.startswith("^")
    names = {n.strip() for n in text.lstrip("^").split(",") if n.strip()}
    unknown = names - set(known)
    if unknown or not names:
        raise NcclError(f"NCCL_ERROR_INVALID_USAGE: {variable}={value}: unknown {unknown}")
    return set(known) - names if negate else names


def _char_range() -> range:
    unsigned = os.environ.get("STRICT_CUPY_UNSIGNED_CHAR") == "1"
    return range(0, 256) if unsigned else range(-128, 128)


def get_version() -> int:
    return 22304


def _cupy13() -> bool:
    return os.environ.get("STRICT_CUPY_VERSION") == "13"


def get_unique_id() -> bytes | tuple:
    raw = os.urandom(UNIQUE_ID_BYTES)
    if not _cupy13():
        return raw
    chars = _char_range()
    return tuple(int(b) + chars.start for b in raw)


def _id_bytes(commId) -> bytes:  # noqa: N803 - cupy's name
    """The id's 128 bytes, from exactly the type this cupy version takes."""
    if not _cupy13():
        if type(commId) is not bytes or len(commId) != UNIQUE_ID_BYTES:
            raise TypeError(f"NcclCommunicator: commId must be 128 bytes, got {type(commId)}")
        return commId
    if type(commId) is not tuple or len(commId) != UNIQUE_ID_BYTES:
        raise TypeError(f"NcclCommunicator: commId must be a tuple of 128, got {type(commId)}")
    chars = _char_range()
    if not all(type(c) is int and c in chars for c in commId):
        raise OverflowError(f"NcclCommunicator: commId holds values outside {chars}")
    return bytes(c - chars.start for c in commId)


def _array(ptr, count, datatype):
    dtype = np.dtype(TYPES[datatype])
    if count == 0:
        return np.empty(0, dtype)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype)


def _rendezvous(uid: bytes, ndev: int, rank: int):
    """The members' communicator, NCCL rank order, made by the members alone (mpi4py is
    imported here: real cupy needs no MPI library to import)."""
    from mpi4py import MPI

    folder = os.path.join(tempfile.gettempdir(), f"strict_cupy_nccl_{uid[:16].hex()}")
    os.makedirs(folder, exist_ok=True)
    mine = os.path.join(folder, str(rank))
    with open(mine + ".tmp", "w") as f:
        f.write(str(MPI.COMM_WORLD.Get_rank()))
    os.replace(mine + ".tmp", mine)  # atomic: a reader sees all of it or nothing
    paths = [os.path.join(folder, str(r)) for r in range(ndev)]
    while not all(os.path.exists(p) for p in paths):
        time.sleep(0.001)  # waiting for peers to arrive, as ncclCommInitRank does
    world_ranks = [int(Path(p).read_text()) for p in paths]
    group = MPI.COMM_WORLD.Get_group().Incl(world_ranks)
    comm = MPI.COMM_WORLD.Create_group(group)
    group.Free()
    comm.Barrier()  # every member has read the folder
    if rank == 0:
        shutil.rmtree(folder, ignore_errors=True)
    return comm


def _current_bus_id() -> tuple:
    """Where NCCL places a rank's GPU: its host and PCI bus id (src/init.cc compares
    busId of ranks with the same hostHash), so two MIG instances of one GPU collide."""
    import socket

    from . import Device, runtime

    props = runtime.getDeviceProperties(Device._current)
    return (socket.gethostname(), props["pciDomainID"], props["pciBusID"], props["pciDeviceID"])


class NcclCommunicator:
    def __init__(self, ndev, commId, rank):  # noqa: N803 - cupy's names
        self.settings = {name: os.environ.get(name) for name in SETTING_NAMES}
        CREATED.append(dict(self.settings))
        if ndev > 1:
            self.algorithms = _enabled("NCCL_ALGO", self.settings["NCCL_ALGO"])
            _enabled("NCCL_PROTO", self.settings["NCCL_PROTO"])
        self.comm = _rendezvous(_id_bytes(commId), ndev, rank)
        assert self.comm.Get_size() == ndev and self.comm.Get_rank() == rank
        assert len(set(self.comm.allgather(commId))) == 1, "ranks got different ids"
        places = self.comm.allgather(_current_bus_id())
        if len(set(places)) != len(places):
            raise NcclError("NCCL_ERROR_INVALID_USAGE: Duplicate GPU detected")

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):  # noqa: N802
        out = _array(recvbuf, count, datatype)
        from mpi4py import MPI

        src = MPI.IN_PLACE if sendbuf == recvbuf else _array(sendbuf, count, datatype)
        self.comm.Allreduce(src, out, [MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN][op])

    def bcast(self, buff, count, datatype, root, stream):
        if self.comm.Get_size() > 1 and "ring" not in self.algorithms:
            raise NcclError(
                "NCCL_ERROR_INVALID_USAGE: no algorithm/protocol available for function "
                f"Broadcast (NCCL_ALGO={self.settings['NCCL_ALGO']})"
            )
        self.comm.Bcast(_array(buff, count, datatype), root)

    def destroy(self):
        pass
