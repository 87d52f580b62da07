"""The one thread that issues every MPI call of the trainer.

Autograd hooks fire on the thread running backward; they hand buckets to this thread,
which reduces them in the order given while backward goes on. Because no other thread
calls MPI once training starts, MPI_THREAD_SERIALIZED suffices (MULTIPLE would slow
MPICH down). Set-up calls (communicator duplication, binding, the start-up broadcast)
go through it too, so the rule has no exceptions.

Where MPI cannot give SERIALIZED, the trainer makes the "thread" inline: every call runs
on the calling (main) thread at once, which FUNNELED allows, and overlap is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class _Inline(Executor):
    """An executor that runs each call at once on the submitting thread."""

    def submit(self, fn, /, *args, **kwargs):
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # handed to the caller through the future
            future.set_exception(error)
        return future


class CommThread:
    """A single worker thread running submitted calls in FIFO order (``inline``: on the
    caller's thread instead, for MPI below THREAD_SERIALIZED)."""

    def __init__(self, inline: bool = False) -> None:
        self.inline = inline
        self._pool: Executor = (
            _Inline()
            if inline
            else ThreadPoolExecutor(max_workers=1, thread_name_prefix="osu-dl-bench-comm")
        )

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
