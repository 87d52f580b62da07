"""Training step time from the model (the oracle of Kahira et al., HPDC 2021, applied to
our data-parallel trainer), and first estimates for the other parallel strategies.

Data parallel: step = forward + backward + optimizer (compute, measured once on this
host at the local batch) + the communication that backward does not hide. The gradients
are reduced in the trainer's buckets (train.buckets.plan_buckets, DDP's caps), one
allreduce each, one after another on the communication thread; bucket i can start when
backward has produced it, taken as backward's start plus backward's time times the share
of gradient bytes in buckets 0..i (backward walks the layers in reverse, as buckets do).
Each allreduce takes its predicted time (costs.predict_seconds) with the algorithm asked
for, or the fastest predicted one. Without overlap every bucket waits for backward's end.

Other strategies (per rank, p ranks, global batch B, W parameter bytes, A(b) activation
bytes of a batch b, summed over layers; Kahira et al., section 3):
- data: memory 3W (weights, gradients, momentum) + A(B/p); traffic 2(p-1)/p W (allreduce);
- spatial (each sample's height split p ways): memory 3W + A(B)/p; traffic: the halo rows
  of every k x k convolution, forward and backward, 2 neighbours, plus the gradient
  allreduce 2(p-1)/p W;
- filter (each layer's output channels split p ways): memory 3W/p + A(B); traffic: every
  layer's output allgathered forward and its gradient reduce-scattered backward,
  2 (p-1)/p A(B) in all;
- pipeline (layers in p stages of equal parameter bytes): memory 3W/p + A(B)/p; traffic:
  each boundary's activation forward and its gradient backward, 2 A_boundary(B) / p per
  rank on average.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from collectives.registry import parse_variant
from collectives.shape import JobShape
from osu_dl_bench.model.costs import predict_seconds
from osu_dl_bench.model.platform import Platform
from osu_dl_bench.model.predict import eligible_variants


@dataclass(frozen=True)
class Compute:
    """Measured compute of one training step at a local batch (seconds)."""

    forward: float
    backward: float
    optimizer: float
    local_batch: int
    threads: int

    @property
    def total(self) -> float:
        """Forward + backward + optimizer."""
        return self.forward + self.backward + self.optimizer


@dataclass(frozen=True)
class LayerStat:
    """A conv or linear layer: its parameters, output elements per sample, kernel side."""

    name: str
    params: int
    out_elems: int
    in_shape: tuple[int, ...]
    kernel: int


@dataclass(frozen=True)
class ModelStats:
    """What the strategies' estimates need from a network."""

    bucket_bytes: tuple[int, ...]
    param_bytes: int
    layers: tuple[LayerStat, ...]
    itemsize: int = 4


def build_network(cfg, shape):
    """The trainer's network for ``cfg`` (train.models.build_model), in float32."""
    from osu_dl_bench.train.models import build_model

    return build_model(cfg, shape).float()


def model_stats(net, shape, cfg) -> ModelStats:
    """Bucket sizes (the trainer's plan) and per-layer sizes (one forward of one sample)."""
    import torch

    from osu_dl_bench.train.buckets import plan_buckets

    params = [p for p in net.parameters() if p.requires_grad]
    sizes = [(p.numel() * p.element_size(), str(p.dtype)) for p in params]
    plan = plan_buckets(sizes, cfg.bucket_cap, cfg.first_bucket)
    buckets = tuple(sum(sizes[i][0] for i in bucket) for bucket in plan)
    layers: list[LayerStat] = []

    def hook(module, inputs, output):
        kernel = module.kernel_size[0] if hasattr(module, "kernel_size") else 1
        count = sum(p.numel() for p in module.parameters(recurse=False))
        layers.append(
            LayerStat(
                type(module).__name__,
                count,
                int(output[0].numel()),
                tuple(inputs[0].shape[1:]),
                int(kernel),
            )
        )

    handles = [
        m.register_forward_hook(hook)
        for m in net.modules()
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))
    ]
    with torch.no_grad():
        net.eval()
        net(torch.zeros(1, shape.channels, shape.size, shape.size))
        net.train()
    for handle in handles:
        handle.remove()
    return ModelStats(buckets, sum(s for s, _ in sizes), tuple(layers))


def measure_compute(net, shape, local_batch: int, threads: int, steps: int = 5) -> Compute:
    """Median forward, backward and SGD-step seconds at ``local_batch`` on this process."""
    import torch

    torch.set_num_threads(threads)
    x = torch.randn(local_batch, shape.channels, shape.size, shape.size)
    y = torch.randint(0, shape.classes, (local_batch,))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    parts = np.zeros((steps + 2, 3))
    for i in range(steps + 2):  # two warm-up steps
        t0 = time.perf_counter()
        loss = loss_fn(net(x), y)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        parts[i] = (t1 - t0, t2 - t1, time.perf_counter() - t2)
    forward, backward, optimizer = np.median(parts[2:], axis=0)
    return Compute(float(forward), float(backward), float(optimizer), local_batch, threads)


def bucket_seconds(
    platform: Platform, layout: JobShape, buckets: tuple[int, ...], algorithm: str | None
) -> list[float]:
    """Predicted allreduce seconds of each bucket (``algorithm`` None: the fastest)."""
    if algorithm is not None:
        variants = [parse_variant("allreduce", algorithm)]
    else:
        variants = eligible_variants("allreduce", layout)
    out = []
    for nbytes in buckets:
        times = [predict_seconds(platform, "allreduce", v, layout, nbytes) for v in variants]
        known = [t for t in times if t is not None]
        if not known:
            raise ValueError(f"no modelled allreduce among {[v.label for v in variants]}")
        out.append(min(known))
    return out


@dataclass(frozen=True)
class StepPrediction:
    """Predicted step: compute, communication, and the part of it backward does not hide."""

    nprocs: int
    compute: float
    comm: float
    exposed: float

    @property
    def step(self) -> float:
        """Seconds per step."""
        return self.compute + self.exposed


def predict_step(
    compute: Compute, buckets: tuple[int, ...], comm: list[float], overlap: bool, nprocs: int
) -> StepPrediction:
    """Bucket-by-bucket schedule of the communication thread against backward."""
    total = max(sum(buckets), 1)
    shares = np.cumsum(buckets) / total
    ready = compute.backward * (shares if overlap else np.ones_like(shares))
    finish = 0.0
    for start, seconds in zip(ready, comm, strict=True):
        finish = max(finish, float(start)) + seconds
    exposed = max(0.0, finish - compute.backward)
    return StepPrediction(nprocs, compute.total, float(sum(comm)), exposed)


@dataclass(frozen=True)
class StrategyEstimate:
    """Per-rank memory and communication volume per step of one parallel strategy."""

    strategy: str
    memory_bytes: float
    comm_bytes: float


def strategy_estimates(stats: ModelStats, nprocs: int, batch: int) -> list[StrategyEstimate]:
    """First estimates for data, spatial, filter and pipeline parallelism (see module doc)."""
    p, item = nprocs, stats.itemsize
    w = stats.param_bytes
    act = sum(layer.out_elems for layer in stats.layers) * item  # per sample
    allreduce = 2 * (p - 1) / p * w
    # Halo of a k x k convolution on (C, H, W) inputs: k // 2 rows of C x W per neighbour.
    halo = sum(
        (layer.kernel // 2) * layer.in_shape[0] * layer.in_shape[-1]
        for layer in stats.layers
        if layer.kernel > 1 and len(layer.in_shape) == 3
    )
    cuts = _pipeline_boundaries(stats.layers, p)
    return [
        StrategyEstimate("data", 3 * w + act * batch / p, allreduce),
        StrategyEstimate(
            "spatial", 3 * w + act * batch / p, 2 * 2 * halo * item * batch * (p > 1) + allreduce
        ),
        StrategyEstimate("filter", 3 * w / p + act * batch, 2 * (p - 1) / p * act * batch),
        StrategyEstimate("pipeline", 3 * w / p + act * batch / p, 2 * cuts * item * batch / p),
    ]


def _pipeline_boundaries(layers: tuple[LayerStat, ...], stages: int) -> float:
    """Activation elements per sample crossing the cuts of ``stages`` equal-parameter stages."""
    if stages <= 1 or not layers:
        return 0.0
    cumulative = np.cumsum([layer.params for layer in layers]) / max(
        sum(layer.params for layer in layers), 1
    )
    targets = np.arange(1, stages) / stages
    index = np.minimum(np.searchsorted(cumulative, targets), len(layers) - 1)
    return float(sum(layers[i].out_elems for i in index))
