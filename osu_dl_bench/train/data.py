"""Training data and the deterministic sharded sampler.

- ``digits``: scikit-learn's bundled 8x8 digits (1797 images, 10 classes), a real image
  set available offline; split into train and test by a seeded permutation.
- ``synthetic``: ImageNet-shaped random tensors, as in Horovod's synthetic benchmark:
  one global batch is generated once and served again every step.

The sampler makes p-rank training see exactly the batches of 1-process training: global
step s uses the global batch ``perm_e[i B : (i+1) B]`` (e = s // steps per epoch, i the
step within the epoch, perm_e a permutation seeded by (seed, e)), and rank r takes the
r-th contiguous 1/p of it. Positions are pure functions of the step, so a checkpoint only
needs the step to restore the sampler.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from osu_dl_bench.train.config import TrainConfig, batch_share
from osu_dl_bench.train.models import InputShape

TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Images:
    """Images and labels; ``take`` gathers a batch by index."""

    x: torch.Tensor
    y: torch.Tensor
    # Served length: larger than the stored images for synthetic data (indices wrap).
    length: int

    def __len__(self) -> int:
        return self.length

    def take(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch at ``indices`` (copied, as a data loader would)."""
        index = torch.from_numpy(indices % len(self.x))
        return self.x.index_select(0, index), self.y.index_select(0, index)


@dataclass(frozen=True)
class DataSplits:
    """Train and (optional) test images, and the input shape models are built for."""

    train: Images
    test: Images | None
    shape: InputShape
    name: str


def _digits(seed: int) -> DataSplits:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    # Pixels are 0..16: scale to [0, 1] so one learning rate suits both data sets.
    x = torch.from_numpy((bunch.data / 16.0).astype(np.float32)).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(bunch.target.astype(np.int64))
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(x)))
    n_test = int(round(len(x) * TEST_FRACTION))
    test, train = order[:n_test], order[n_test:]
    return DataSplits(
        Images(x[train].contiguous(), y[train].contiguous(), len(train)),
        Images(x[test].contiguous(), y[test].contiguous(), len(test)),
        InputShape(1, 8, 10),
        "digits",
    )


def _synthetic(cfg: TrainConfig) -> DataSplits:
    # The same generator on every rank: the global batch is one tensor, sharded as the
    # digits are, so validation works on synthetic data too.
    generator = torch.Generator().manual_seed(cfg.seed)
    shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
    x = torch.randn(shape, generator=generator)
    y = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=generator)
    images = Images(x, y, cfg.batch_size * cfg.synthetic_batches)
    return DataSplits(images, None, InputShape(3, cfg.image_size, cfg.num_classes), "synthetic")


def _images_as(images: Images, dtype: torch.dtype) -> Images:
    return Images(images.x.to(dtype), images.y, images.length)


def load_data(cfg: TrainConfig) -> DataSplits:
    """The data set ``cfg.data``, its images in ``cfg.compute_dtype``."""
    splits = _digits(cfg.seed) if cfg.data == "digits" else _synthetic(cfg)
    dtype = getattr(torch, cfg.compute_dtype)
    test = None if splits.test is None else _images_as(splits.test, dtype)
    return DataSplits(_images_as(splits.train, dtype), test, splits.shape, splits.name)


@lru_cache(maxsize=2)
def _permutation(size: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(size)


@dataclass(frozen=True)
class ShardedSampler:
    """Which samples rank ``rank`` of ``nprocs`` trains on at each global step."""

    size: int
    global_batch: int
    nprocs: int
    rank: int
    seed: int

    @property
    def steps_per_epoch(self) -> int:
        """Full global batches per epoch (the last partial one is dropped on every rank)."""
        return self.size // self.global_batch

    def global_indices(self, step: int) -> np.ndarray:
        """The global batch of ``step`` (what 1-process training uses)."""
        epoch, within = divmod(step, self.steps_per_epoch)
        start = within * self.global_batch
        return _permutation(self.size, self.seed, epoch)[start : start + self.global_batch]

    def local_indices(self, step: int) -> np.ndarray:
        """This rank's contiguous share of the global batch of ``step`` (batch_share)."""
        lo, hi = batch_share(self.global_batch, self.nprocs, self.rank)
        return self.global_indices(step)[lo:hi]


def eval_shard(images: Images, nprocs: int, rank: int) -> np.ndarray:
    """This rank's part of an evaluation set (every sample evaluated exactly once)."""
    return np.arange(rank, len(images), nprocs)
