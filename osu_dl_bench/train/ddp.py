"""The baselines the trainer is measured against: PyTorch DistributedDataParallel over Gloo
(CPU and GPU) and, on GPUs, over NCCL (DDP's default there), with the same buckets
(25 MiB, first 1 MiB), model, batch and optimizer.

torch.distributed's default group is created once per process on the TCPStore of
collectives/backends/rendezvous.py (rank 0 hosts it; its address travels over MPI). A
second backend in the same process gets a group of its own over every rank
(``dist.new_group(backend=...)``). DDP broadcasts rank 0's state itself at construction;
buffers are not re-broadcast every forward, matching our trainer.
"""

from __future__ import annotations

import inspect
import os
import time
from typing import Any

import torch
from torch import nn

from collectives.backends import rendezvous
from osu_dl_bench.train.config import TrainConfig
from osu_dl_bench.train.device import device_idle
from osu_dl_bench.train.reducer import StepComm
from osu_dl_bench.train.session import Session
from osu_dl_bench.train.trainer import StepStats, make_optimizer

BACKENDS = ("gloo", "nccl")
_groups: dict[str, Any] = {}  # backend -> its process group over every rank


def process_group(session: Session, backend: str) -> Any:
    """A torch.distributed group over every rank on ``backend`` (gloo or nccl): the default
    group for the first backend asked (created once per process), a new group for another.
    Collective: every rank asks for the same backends in the same order."""
    import torch.distributed as dist

    if backend not in BACKENDS:
        raise ValueError(f"DDP backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend not in _groups:
        if not dist.is_initialized():
            _init_default_group(session, backend)
        if dist.get_backend() == backend:
            _groups[backend] = dist.group.WORLD
        else:
            _groups[backend] = dist.new_group(backend=backend)
    return _groups[backend]


def _init_default_group(session: Session, backend: str) -> None:
    """torch.distributed's default group on ``backend``, met where backends/rendezvous.py
    says (the same store address and timeout as the gloo backend's)."""
    import torch.distributed as dist

    def exchange(value: Any) -> list:
        return session.thread.run(session.comm.allgather, value)

    one_host = session.topology.nodes == 1 and not session.topology.emulated
    meeting = rendezvous.meeting_place(exchange, one_host)
    if meeting.device is not None:
        # torch's Gloo binds to the host name's address otherwise, which may be loopback
        # or one the other nodes cannot reach.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", meeting.device.name)
    store = rendezvous.store(exchange, session.rank, session.nprocs, meeting)

    def init() -> None:
        dist.init_process_group(
            backend,
            store=store,
            rank=session.rank,
            world_size=session.nprocs,
            timeout=meeting.timeout,
        )

    what = f"DDP's {backend} group did not start within {meeting.timeout.total_seconds():g} s"
    rendezvous.agreed(exchange, what, init)


def _no_buffer_sync() -> dict[str, bool]:
    """DDP's option for 'no buffer broadcast each forward', by the torch version's name."""
    params = inspect.signature(nn.parallel.DistributedDataParallel).parameters
    if "forward_sync_buffers" in params:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


class DDPTrainer:
    """The same step as DataParallelTrainer.step, through DDP over ``backend``."""

    def __init__(
        self, model: nn.Module, cfg: TrainConfig, session: Session, backend: str = "gloo"
    ) -> None:
        group = process_group(session, backend)
        self.model, self.backend = model, backend
        self.device = next(model.parameters()).device
        self.ddp = nn.parallel.DistributedDataParallel(
            model,
            bucket_cap_mb=cfg.bucket_cap / (1 << 20),
            gradient_as_bucket_view=True,
            process_group=group,
            **_no_buffer_sync(),
        )
        self.optimizer = make_optimizer(cfg, model)
        # DDP averages gradients by the world size; where shares differ (batch_share) the
        # loss is scaled so that the average still weights each rank by its share.
        share = cfg.local_batch(session.nprocs, session.rank)
        self.loss_weight = share * session.nprocs / cfg.batch_size

    def broadcast_state(self, root: int = 0) -> float:
        """DDP broadcast rank 0's state when it was built: nothing left to do."""
        return 0.0

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        """Forward, backward (DDP's own overlapped allreduce), optimizer step."""
        start = time.perf_counter()
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        self.ddp.train()
        self.optimizer.zero_grad(set_to_none=False)
        logits = self.ddp(x)
        loss = nn.functional.cross_entropy(logits, y)
        (loss * self.loss_weight if self.loss_weight != 1 else loss).backward()
        self.optimizer.step()
        device_idle(self.device)  # the optimizer's kernels belong to this step's time
        seconds = time.perf_counter() - start
        correct = int((logits.argmax(1) == y).sum())
        # DDP does not expose its communication time.
        return StepStats(loss.item() * len(y), correct, len(y), seconds, StepComm(0.0, 0.0))
