"""The trainer's models: a small CNN for the 8x8 digits and a ResNet-style CNN for
throughput with configurable depth and width (no torchvision needed).

``cnn`` has no batch norm and no dropout, so p-rank training with global batch B computes
exactly what 1-process training with batch B does (up to summation order): the model
``--validate`` checks. ``resnet`` follows He et al. 2016 (basic blocks, 4 stages of widths
w, 2w, 4w, 8w, depth 2 + 8k for k blocks per stage; depth 18 and width 64 is ResNet-18);
its batch norms compute per-rank statistics, as in PyTorch DDP without SyncBatchNorm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from osu_dl_bench.errors import UsageError
from osu_dl_bench.train.config import TrainConfig


@dataclass(frozen=True)
class InputShape:
    """What a model is built for: image channels, side and number of classes."""

    channels: int
    size: int
    classes: int


class DigitsCNN(nn.Module):
    """Two 3x3 convolutions, a 2x2 max pool and two linear layers (~38k parameters)."""

    def __init__(self, shape: InputShape) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(shape.channels, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            # Identity for 8x8 digits; keeps the head's size fixed for other images.
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(32 * 16, 64), nn.ReLU(), nn.Linear(64, shape.classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class BasicBlock(nn.Module):
    """Two 3x3 conv + batch-norm layers with an identity (or 1x1 projection) shortcut."""

    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False),
            nn.BatchNorm2d(channels_out),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False),
            nn.BatchNorm2d(channels_out),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                nn.BatchNorm2d(channels_out),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet with basic blocks: ``depth`` = 2 + 8 k, base width ``width``."""

    def __init__(self, shape: InputShape, depth: int, width: int) -> None:
        super().__init__()
        blocks = (depth - 2) // 8
        # ImageNet-sized inputs get the 7x7/2 stem and max pool; small images keep their
        # resolution (as CIFAR ResNets do), so 8x8 digits still pass four stages.
        large = shape.size >= 64
        kernel, stride = (7, 2) if large else (3, 1)
        stem: list[nn.Module] = [
            nn.Conv2d(shape.channels, width, kernel, stride, kernel // 2, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        ]
        if large:
            stem.append(nn.MaxPool2d(3, 2, 1))
        layers: list[nn.Module] = []
        channels = width
        for stage in range(4):
            out = width << stage
            for index in range(blocks):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(BasicBlock(channels, out, stride))
                channels = out
        self.body = nn.Sequential(*stem, *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(channels, shape.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


BUILDERS: dict[str, Callable[[TrainConfig, InputShape], nn.Module]] = {
    "cnn": lambda cfg, shape: DigitsCNN(shape),
    "resnet": lambda cfg, shape: ResNet(shape, cfg.depth, cfg.width),
}


def build_model(cfg: TrainConfig, shape: InputShape) -> nn.Module:
    """The model ``cfg.model`` for inputs of ``shape``."""
    if cfg.model not in BUILDERS:
        raise UsageError(f"unknown model {cfg.model!r}: expected one of {', '.join(BUILDERS)}")
    return BUILDERS[cfg.model](cfg, shape)


def has_batch_norm(model: nn.Module) -> bool:
    """True if any layer normalises with batch statistics (per rank under data parallel)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def parameter_count(model: nn.Module) -> int:
    """Trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
