"""The trainer's view of the job: a private communicator, its topology, the collective
policy and the communication thread, with the few auxiliary collectives the trainer
needs (metrics, timings, checkpoint barrier) routed through the same policy.

Every method is collective over the communicator and runs its MPI calls on the
communication thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from collectives.device import is_device_array
from collectives.ops import reduce_op
from osu_dl_bench.runtime.rank_agreement import agree_on_errors
from osu_dl_bench.runtime.start import thread_level_name
from osu_dl_bench.runtime.topology import Topology, discover_topology
from osu_dl_bench.train.comm_thread import CommThread
from osu_dl_bench.train.config import TrainConfig
from osu_dl_bench.train.policy import (
    BoundCollective,
    CollectivePolicy,
    build_policy,
    gpu_default,
)

T = TypeVar("T")
_SUM = reduce_op("sum")
HOST = "cpu"  # the buffer kind of a host array (metric sums) in a run on GPU buffers


def threads_may_call_mpi() -> bool:
    """Whether MPI was initialised at THREAD_SERIALIZED or above (the communication thread
    may then call it); else the trainer runs its calls inline."""
    from mpi4py import MPI

    return MPI.Query_thread() >= MPI.THREAD_SERIALIZED


def thread_level_note() -> str:
    """One line saying that overlap is off because MPI runs below SERIALIZED."""
    from mpi4py import MPI

    return (
        f"# MPI runs at thread level {thread_level_name(MPI.Query_thread())}, below the "
        f"serialized the communication thread needs: MPI calls stay on the main thread "
        f"and overlap is off"
    )


@dataclass
class Session:
    """Communicator, topology, policy and communication thread of one training run."""

    comm: Any
    topology: Topology
    policy: CollectivePolicy
    thread: CommThread

    @classmethod
    def open(cls, world: Any, cfg: TrainConfig, thread: CommThread) -> Session:
        """Duplicate ``world`` (our traffic never matches the user's), find the topology
        and build the policy, all on ``thread``."""

        def setup() -> Session:
            comm = world.Dup()
            topology = discover_topology(comm)
            default = gpu_default(cfg, comm, topology)  # collective: outside the agreed step
            policy = agree_on_errors(comm, lambda: build_policy(cfg, comm, topology, default))
            return cls(comm, topology, policy, thread)

        return thread.run(setup)

    @property
    def rank(self) -> int:
        """This process's rank in the trainer's communicator."""
        return self.comm.Get_rank()

    @property
    def nprocs(self) -> int:
        """Ranks in the trainer's communicator."""
        return self.comm.Get_size()

    def choose(
        self, collective: str, array: np.ndarray, nbytes: int | None = None
    ) -> BoundCollective:
        """The policy's algorithm for a call on ``array``, chosen as for ``nbytes`` if
        given, else its size, and for the kind of memory ``array`` is in (call on the
        thread)."""
        size = array.nbytes if nbytes is None else nbytes
        on_host = self.policy.device == "cuda" and not is_device_array(array)
        return self.policy.choose(collective, size, array.dtype.name, HOST if on_host else None)

    def allreduce_sum(self, array: np.ndarray) -> None:
        """Sum ``array`` over ranks, in place."""
        self.thread.run(lambda: self.choose("allreduce", array).call(None, array, _SUM, 0))

    def bcast(self, array: np.ndarray, root: int = 0, nbytes: int | None = None) -> BoundCollective:
        """Broadcast ``array`` from ``root`` in place (algorithm chosen as for ``nbytes``,
        as ``choose``); returns the algorithm used."""

        def run() -> BoundCollective:
            bound = self.choose("bcast", array, nbytes)
            bound.call(None, array, None, root)
            return bound

        return self.thread.run(run)

    def allgather(self, array: np.ndarray) -> np.ndarray:
        """Every rank's ``array`` stacked in rank order (same shape on every rank)."""
        out = np.empty((self.nprocs, *array.shape), array.dtype)
        flat = np.ascontiguousarray(array).reshape(-1)
        self.thread.run(lambda: self.choose("allgather", flat).call(flat, out.reshape(-1), None, 0))
        return out

    def barrier(self) -> None:
        """Wait for every rank."""
        empty = np.empty(0, np.uint8)
        self.thread.run(lambda: self.choose("barrier", empty).call(None, None, None, 0))

    def agree(self, step: Callable[[], T]) -> T:
        """Run ``step`` on every rank; a UsageError on any rank is raised on all of them."""
        return self.thread.run(agree_on_errors, self.comm, step)

    def close(self) -> None:
        """Free the private communicator."""
        self.thread.run(self.comm.Free)
