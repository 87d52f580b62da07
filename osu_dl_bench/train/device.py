"""Where the trainer's tensors live: this process's CPU, or (``--device cuda``) the GPU the
rank was given, with the views and waits that hand torch's tensors to the collectives.

On the GPU the gradient buckets stay torch tensors (autograd writes into them) and the
collectives see cupy views of the same memory (``cupy.asarray`` reads torch's
``__cuda_array_interface__``; nothing is copied). torch queues its kernels on its current
stream (the legacy default stream) while the collectives run on the communication thread,
on a non-blocking stream of that thread's own (``collectives.device.use_own_stream``): on
the default stream too, NCCL and the staging copies would be ordered with backward's
kernels, and nothing would overlap. Before a bucket or the state is handed over, an event
recorded on torch's stream is waited for, so MPI or NCCL never reads a gradient a kernel
is still writing (the same rule as ``collectives.device.device_ready`` for cupy's own
kernels).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from osu_dl_bench.errors import UsageError


def place(buffers: str, session: Any) -> torch.device:
    """The torch device of this rank: CPU, or for buffers 'cuda' the GPU picked for this
    node-local rank (collectives.device.select_local_gpu: collective, so on the
    communication thread, where it also makes the GPU current; then here too)."""
    if buffers != "cuda":
        return torch.device("cpu")
    session.agree(_require_gpu)  # a rank without one fails them all, not a hang
    index = session.thread.run(communication_gpu, session.comm)
    torch.cuda.set_device(index)  # the current device is per thread: the main one too
    import cupy

    cupy.cuda.Device(index).use()
    return torch.device("cuda", index)


def communication_gpu(comm: Any) -> int:
    """On the communication thread: choose this rank's GPU (collective over ``comm``) and
    give the thread its own non-blocking stream on it; returns the device index."""
    from collectives.device import select_local_gpu, use_own_stream

    index = select_local_gpu(comm)
    use_own_stream()  # after select_local_gpu made the device current: a stream has one
    return index


def _require_gpu() -> None:
    if not torch.cuda.is_available():
        raise UsageError(
            "--device cuda: torch sees no GPU here (torch.cuda.is_available() is False: "
            "no GPU, or a CPU build of torch)"
        )


def array_view(tensor: torch.Tensor) -> Any:
    """The collectives' view of ``tensor``'s memory: numpy on the CPU, cupy on a GPU."""
    if tensor.is_cuda:
        import cupy

        return cupy.asarray(tensor)
    return tensor.numpy()


def device_idle(device: torch.device) -> None:
    """Wait until ``device`` has run every kernel queued so far (nothing on the CPU): a
    clock stopped before that would leave the step's last kernels out of its time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _nothing() -> None:
    return None


def ready_marker(tensor: torch.Tensor) -> Callable[[], None]:
    """Call on the thread that queued the kernels writing ``tensor``; the returned
    function, called anywhere later, waits until they are done (nothing on the CPU)."""
    if not tensor.is_cuda:
        return _nothing
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(tensor.device))
    return event.synchronize


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the CPU (itself there already), for comparisons and checkpoints."""
    return tensor.detach().cpu() if tensor.is_cuda else tensor.detach()
