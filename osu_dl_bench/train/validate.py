"""--validate: 1-process training with the global batch, run beside the p-rank job on
rank 0 from the same starting state, and the parameter comparison after N steps.

Both run in float64 (run.py converts the model and the images), so they differ only by
the order of float64 sums: a bound that means the same on every CPU. Every rank's
replica is compared, not only rank 0's: a reduction wrong on one rank shows too.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from osu_dl_bench.train.config import (
    FLOAT64_TOLERANCE,
    FP16_RELATIVE_TOLERANCE,
    TrainConfig,
)
from osu_dl_bench.train.device import host_copy
from osu_dl_bench.train.session import Session
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
    def flat(self) -> torch.Tensor:
        """Every parameter, flattened and concatenated in registration order."""
        return _flat_parameters(self.model)


@dataclass(frozen=True)
class Divergence:
    """The element where some rank's replica is furthest from the reference."""

    max_abs_diff: float  # NaN if any replica holds NaN where the reference does not
    rank: int
    where: str  # 'classifier.2.weight[3, 7]'
    scale: float  # largest |reference parameter|


def tolerance_for(cfg: TrainConfig, scale: float) -> float:
    """--tolerance if given; else float64's, or with fp16 compression a bound relative to
    ``scale``, the largest |parameter| (train.config states both)."""
    if cfg.tolerance is not None:
        return cfg.tolerance
    if cfg.fp16_compress:
        return max(FLOAT64_TOLERANCE, FP16_RELATIVE_TOLERANCE * scale)
    return FLOAT64_TOLERANCE


def _flat_parameters(model: nn.Module) -> torch.Tensor:
    """Every parameter, concatenated on the CPU (a GPU replica is copied)."""
    return torch.cat([host_copy(p).reshape(-1) for p in model.parameters()])


def _element_name(model: nn.Module, index: int) -> str:
    """'name[i, j]' of element ``index`` of the concatenated parameters."""
    for name, param in model.named_parameters():
        if index < param.numel():
            position = np.unravel_index(index, tuple(param.shape) or (1,))
            return f"{name}[{', '.join(str(int(i)) for i in position)}]"
        index -= param.numel()
    raise IndexError(index)


@torch.no_grad()
def worst_element(model: nn.Module, reference: torch.Tensor) -> tuple[float, str]:
    """(largest |parameter - reference|, where), a NaN counting as the largest."""
    diff = (_flat_parameters(model) - reference).abs()
    ranked = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    index = int(torch.argmax(ranked))
    return float(diff[index]), _element_name(model, index)


def _worst_rank(rows: list[tuple[float, str]]) -> int:
    return max(range(len(rows)), key=lambda r: (math.isnan(rows[r][0]), rows[r][0]))


def compare(session: Session, reference: Reference | None, model: nn.Module) -> Divergence:
    """Collective: rank 0's reference parameters against every rank's replica.

    Plain MPI calls carry the comparison, not the algorithms under test, so a wrong
    bcast or allreduce cannot hide its own error.
    """
    local = _flat_parameters(model)
    ref = reference.flat() if reference is not None else torch.empty_like(local)
    if ref.shape != local.shape or ref.dtype != local.dtype:
        raise RuntimeError(f"reference {ref.dtype}{tuple(ref.shape)} vs {local.dtype}")
    session.thread.run(session.comm.Bcast, ref.numpy(), 0)
    rows = session.thread.run(session.comm.allgather, worst_element(model, ref))
    rank = _worst_rank(rows)
    diff, where = rows[rank]
    return Divergence(diff, rank, where, float(ref.abs().max()))
