"""Real models' gradient traffic: the buckets PyTorch DDP reduces in one training step,
computed from the model's definition alone (shapes on torch's ``meta`` device: no
weights, no memory, no data).

The plan is the trainer's own (train.buckets.plan_buckets with DDP's defaults, 1 MiB
first bucket and 25 MiB cap, parameters in reverse registration order), so ``bench
--buckets`` and ``tune --for`` replay what ``train`` and DDP send. Models: ResNet-50,
VGG-16 and AlexNet as torchvision.models defines them (He et al. 2016, Simonyan and
Zisserman 2015, Krizhevsky 2014's one-GPU variant; 1000 classes) and the trainer's bundled
models at the trainer's default input shape.

The three torchvision nets are declared here, parameters only (their layers, names and
registration order follow torchvision/models/{resnet,vgg,alexnet}.py, v0.28; a test
compares the shapes with torchvision's wherever it imports): the PyPI torchvision wheel
is a CUDA build whose import fails beside CPU-only torch, and shapes need no kernels.

Importing this module loads no torch: ``MODEL_NAMES`` serves option checks and
``bucket_plan`` imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from osu_dl_bench.errors import UsageError
from osu_dl_bench.train.config import DEFAULT_DATA, MODELS, TORCH_EXTRA, TrainConfig
from osu_dl_bench.train.ddp_defaults import DEFAULT_BUCKET_CAP, DEFAULT_FIRST_BUCKET

REFERENCE_MODELS = ("resnet50", "vgg16", "alexnet")
MODEL_NAMES = (*MODELS, *REFERENCE_MODELS)
# sklearn's 8x8 digits (train.data): one channel, 10 classes; the resnet's synthetic
# images take the trainer's --image-size and --num-classes defaults.
DIGITS_SHAPE = (1, 8, 10)
IMAGENET_CLASSES = 1000
# VGG-16 ("D" in Simonyan and Zisserman's table 1): channels, "M" a max pool.
VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M")
VGG16_LAYERS += (512, 512, 512, "M")
RESNET50_BLOCKS = (3, 4, 6, 3)
BOTTLENECK_EXPANSION = 4


@dataclass(frozen=True)
class BucketPlan:
    """One training step's gradient traffic: bucket sizes in bytes, in DDP's order."""

    model: str
    parameters: int  # trainable parameters
    bucket_bytes: tuple[int, ...]
    members: tuple[tuple[str, ...], ...]  # per bucket, its parameters' names, as filled
    itemsize: int = 4  # float32 gradients

    @property
    def total_bytes(self) -> int:
        """Bytes reduced per step."""
        return sum(self.bucket_bytes)

    @property
    def bucket_counts(self) -> tuple[int, ...]:
        """Elements per bucket (each bucket is one allreduce of that many elements)."""
        return tuple(size // self.itemsize for size in self.bucket_bytes)


def check_model_name(name: str) -> str:
    """``name`` if it is a known model; UsageError listing the known ones otherwise."""
    if name not in MODEL_NAMES:
        raise UsageError(f"unknown model {name!r}: expected one of {', '.join(MODEL_NAMES)}")
    return name


def _import_torch(name: str) -> Any:
    """torch, or a UsageError naming the extra to install."""
    try:
        import torch
    except ImportError:
        raise UsageError(f"model {name} is built with torch: {TORCH_EXTRA}") from None
    return torch


def _bottleneck(nn: Any, channels_in: int, planes: int, stride: int) -> Any:
    """torchvision's Bottleneck: 1x1, 3x3 (the stride), 1x1 x4, with a projection where
    the shape changes."""
    block, out = nn.Module(), planes * BOTTLENECK_EXPANSION
    block.conv1, block.bn1 = nn.Conv2d(channels_in, planes, 1, bias=False), nn.BatchNorm2d(planes)
    block.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
    block.bn2 = nn.BatchNorm2d(planes)
    block.conv3, block.bn3 = nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)
    if stride != 1 or channels_in != out:
        block.downsample = nn.Sequential(
            nn.Conv2d(channels_in, out, 1, stride, bias=False), nn.BatchNorm2d(out)
        )
    return block


def _resnet50(nn: Any) -> Any:
    net = nn.Module()
    net.conv1, net.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
    channels = 64
    for stage, blocks in enumerate(RESNET50_BLOCKS):
        planes, layer = 64 << stage, []
        for index in range(blocks):
            stride = 2 if stage > 0 and index == 0 else 1
            layer.append(_bottleneck(nn, channels, planes, stride))
            channels = planes * BOTTLENECK_EXPANSION
        setattr(net, f"layer{stage + 1}", nn.Sequential(*layer))
    net.fc = nn.Linear(channels, IMAGENET_CLASSES)
    return net


def _vgg16(nn: Any) -> Any:
    net, layers, channels = nn.Module(), [], 3
    for item in VGG16_LAYERS:
        if item == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(channels, item, 3, padding=1), nn.ReLU()]
            channels = item
    net.features = nn.Sequential(*layers)
    net.classifier = nn.Sequential(
        *(nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout()),
        *(nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout()),
        nn.Linear(4096, IMAGENET_CLASSES),
    )
    return net


def _alexnet(nn: Any) -> Any:
    net = nn.Module()
    net.features = nn.Sequential(
        *(nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2)),
        *(nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2)),
        *(nn.Conv2d(192, 384, 3, padding=1), nn.ReLU()),
        *(nn.Conv2d(384, 256, 3, padding=1), nn.ReLU()),
        *(nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2)),
    )
    net.classifier = nn.Sequential(
        *(nn.Dropout(), nn.Linear(256 * 6 * 6, 4096), nn.ReLU()),
        *(nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU()),
        nn.Linear(4096, IMAGENET_CLASSES),
    )
    return net


REFERENCE_BUILDERS: dict[str, Callable[[Any], Any]] = {
    "resnet50": _resnet50,
    "vgg16": _vgg16,
    "alexnet": _alexnet,
}


def _bundled(name: str) -> Any:
    from osu_dl_bench.train.models import InputShape, build_model

    cfg = TrainConfig(model=name, data=DEFAULT_DATA[name])
    if cfg.data == "digits":
        shape = InputShape(*DIGITS_SHAPE)
    else:
        shape = InputShape(3, cfg.image_size, cfg.num_classes)
    return build_model(cfg, shape)


def build_on_meta(name: str) -> Any:
    """The model ``name`` with every tensor on the meta device (shapes, no storage)."""
    check_model_name(name)
    torch = _import_torch(name)
    with torch.device("meta"):
        if name in REFERENCE_BUILDERS:
            return REFERENCE_BUILDERS[name](torch.nn)
        return _bundled(name)


def bucket_plan(
    name: str, cap: int = DEFAULT_BUCKET_CAP, first_cap: int = DEFAULT_FIRST_BUCKET
) -> BucketPlan:
    """DDP's buckets for model ``name`` with float32 gradients: sizes in bytes, in the
    order backward fills them."""
    from osu_dl_bench.train.buckets import plan_buckets

    named = [(n, p) for n, p in build_on_meta(name).named_parameters() if p.requires_grad]
    # DDP plans by the gradients' bytes: float32 training.
    sizes = [(p.numel() * 4, "float32") for _, p in named]
    plan = plan_buckets(sizes, cap, first_cap)
    return BucketPlan(
        name,
        sum(p.numel() for _, p in named),
        tuple(sum(sizes[i][0] for i in bucket) for bucket in plan),
        tuple(tuple(named[i][0] for i in bucket) for bucket in plan),
    )
