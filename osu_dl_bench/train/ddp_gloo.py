"""Kept for imports of the Gloo baseline's old home: it lives in train.ddp."""

from osu_dl_bench.train.ddp import DDPGlooTrainer, init_gloo_group

__all__ = ["DDPGlooTrainer", "init_gloo_group"]
