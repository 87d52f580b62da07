"""--validate: 1-process training with the global batch, run beside the p-rank job on
rank 0 from the same starting state, and the parameter comparison after N steps."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from osu_dl_bench.train.options import TrainConfig
from osu_dl_bench.train.trainer import make_optimizer


class Reference:
    """A plain model and optimizer trained on whole global batches (no communication)."""

    def __init__(
        self,
        cfg: TrainConfig,
        build: Callable[[], nn.Module],
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> None:
        # Forked so building the copy leaves this rank's RNG stream as it was.
        with torch.random.fork_rng():
            self.model = build()
        self.model.load_state_dict(model.state_dict())
        self.optimizer = make_optimizer(cfg, self.model)
        # A deep copy: loading may alias the tensors of the state dict it is given.
        self.optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One ordinary training step on the global batch."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(self.model(x), y).backward()
        self.optimizer.step()

    @torch.no_grad()
    def max_abs_diff(self, model: nn.Module) -> float:
        """Largest |parameter - reference parameter| over every parameter."""
        pairs = zip(model.parameters(), self.model.parameters(), strict=True)
        return max((float((a - b).abs().max()) for a, b in pairs), default=0.0)
