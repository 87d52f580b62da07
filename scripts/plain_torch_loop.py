"""The trainer's own overhead: the same model, data, batch and optimizer as
``osu-dl-bench train`` (its options, parsed by its parser), trained by the plain PyTorch
loop of the PyTorch tutorials in one process, without MPI, buckets or the selector.

    python scripts/plain_torch_loop.py --device cuda --model resnet --data synthetic \
        --steps 50 [any other train option]

Prints img/s the way ``train`` does (train.records: mean +- 1.96 std over timing
iterations of --batches-per-iter steps after --warmup-steps), from steps timed the way
the trainer times them: the batch copied to the device, forward, backward, the
optimizer's step, until the device is idle. Compare it with ``train`` at ``-n 1`` on the
same options: the ratio is what the trainer's machinery costs a step. The options of
communication, validation, checkpoints and output have no meaning in one process without
MPI and are ignored.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
from torch import nn

from osu_dl_bench.commands.train_cli import add_arguments, config_from_args
from osu_dl_bench.errors import UsageError
from osu_dl_bench.train.config import TrainConfig
from osu_dl_bench.train.data import ShardedSampler, load_data
from osu_dl_bench.train.device import device_idle
from osu_dl_bench.train.models import build_model
from osu_dl_bench.train.records import iteration_rates, throughput
from osu_dl_bench.train.trainer import make_optimizer


def step_seconds(cfg: TrainConfig, device: torch.device) -> np.ndarray:
    """Seconds of each of the run's steps, trained by the plain loop."""
    data = load_data(cfg)
    sampler = ShardedSampler(len(data.train), cfg.batch_size, 1, 0, cfg.seed)
    torch.manual_seed(cfg.seed)  # the trainer's rank 0 seeds the same way
    model = build_model(cfg, data.shape).to(getattr(torch, cfg.compute_dtype)).to(device)
    optimizer = make_optimizer(cfg, model)
    model.train()
    total = cfg.steps or cfg.epochs * sampler.steps_per_epoch
    seconds = np.zeros(total)
    for step in range(total):
        x, y = data.train.take(sampler.local_indices(step))
        start = time.perf_counter()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        device_idle(device)
        seconds[step] = time.perf_counter() - start
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Parse train's options, train with the plain loop, print img/s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        cfg = config_from_args(parser.parse_args(argv))
    except UsageError as error:
        parser.error(str(error))  # one message, exit 2
    device = torch.device("cuda" if cfg.buffers == "cuda" else "cpu")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seconds = step_seconds(cfg, device)
    rates = iteration_rates(seconds, cfg.batch_size, cfg.warmup_steps, cfg.batches_per_iter)
    result = throughput(rates[np.newaxis, :], cfg.batches_per_iter, cfg.batch_size)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    steps = len(seconds)
    print(f"# plain PyTorch loop: {cfg.model}, batch {cfg.batch_size}, {steps} steps on {where}")
    if result is None:
        print("# img/s: not enough steps after warm-up for one timing iteration")
        return 1
    print(
        f"# img/s: {result.total_mean:.1f} +- {result.total_ci:.1f} "
        f"({result.iterations} iterations of {result.batches_per_iter} steps after "
        f"{cfg.warmup_steps} warm-up)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
