"""The one thread that issues every MPI call of the trainer.

Autograd hooks fire on the thread running backward; they hand buckets to this thread,
which reduces them in the order given while backward goes on. Because no other thread
calls MPI once training starts, MPI_THREAD_SERIALIZED suffices (MULTIPLE would slow
MPICH down). Set-up calls (communicator duplication, binding, the start-up broadcast)
go through it too, so the rule has no exceptions.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class CommThread:
    """A single worker thread running submitted calls in FIFO order."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="osu-dl-bench-comm")

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(*args)``; its result (or exception) arrives in the future."""
        return self._pool.submit(fn, *args)

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the thread and wait for it (exceptions re-raised here)."""
        return self.submit(fn, *args).result()

    def close(self, wait: bool = True) -> None:
        """Stop the thread: after the queued calls, or (wait=False) dropping them."""
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def __enter__(self) -> CommThread:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        # On an error the thread may be blocked in a collective whose peers are gone:
        # waiting would hang before the entry point can abort the job.
        self.close(wait=exc_type is None)
