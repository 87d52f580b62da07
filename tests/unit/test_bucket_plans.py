"""Real models' gradient traffic (train.traffic): DDP's bucket plans from shapes alone,
and the options of ``bench allreduce --buckets``."""

from __future__ import annotations

import builtins
import importlib.util

import pytest
from support.options import command_config

from osu_dl_bench.errors import UsageError
from osu_dl_bench.train.ddp_defaults import DEFAULT_BUCKET_CAP, DEFAULT_FIRST_BUCKET
from osu_dl_bench.train.traffic import MODEL_NAMES, bucket_plan, build_on_meta, check_model_name

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (pip install 'osu-dl-bench[train]')",
)

# Published parameter counts (torchvision.models' documentation tables).
PARAMETERS = {"resnet50": 25_557_032, "vgg16": 138_357_544, "alexnet": 61_100_840}


@needs_torch
@pytest.mark.parametrize("model", sorted(PARAMETERS))
def test_reference_models_reduce_their_published_parameter_count_in_float32(model):
    plan = bucket_plan(model)
    assert plan.parameters == PARAMETERS[model]
    assert plan.total_bytes == PARAMETERS[model] * 4
    assert sum(plan.bucket_counts) == PARAMETERS[model]


@needs_torch
@pytest.mark.parametrize("model", MODEL_NAMES)
def test_every_bucket_closes_at_its_cap_as_ddp_closes_them(model):
    """A bucket closes with the tensor that takes it to its cap (1 MiB first, then
    25 MiB), so without its last tensor it is below the cap; only the last may stay open."""
    plan = bucket_plan(model)
    shapes = dict(build_on_meta(model).named_parameters())
    for number, (size, names) in enumerate(zip(plan.bucket_bytes, plan.members, strict=True)):
        cap = DEFAULT_FIRST_BUCKET if number == 0 else DEFAULT_BUCKET_CAP
        last = shapes[names[-1]].numel() * 4
        assert size - last < cap
        assert size >= cap or number == len(plan.bucket_bytes) - 1


@needs_torch
def test_resnet50_buckets_follow_reverse_registration_order():
    plan = bucket_plan("resnet50")
    registered = [name for name, _ in build_on_meta("resnet50").named_parameters()]
    assert plan.members[0] == ("fc.bias", "fc.weight")
    assert [n for bucket in plan.members for n in bucket] == registered[::-1]
    # The first bucket is the classifier alone: its 8 MB weight takes it past 1 MiB.
    assert plan.bucket_bytes[0] == (2048 * 1000 + 1000) * 4


@needs_torch
def test_the_bundled_models_are_planned_at_the_trainers_default_shape():
    # cnn at the 8x8 digits (10 classes); resnet: ResNet-18 at 224 px, 1000 classes.
    assert bucket_plan("cnn").parameters == 38_282
    assert bucket_plan("resnet").parameters == 11_689_512


@needs_torch
def test_reference_shapes_match_torchvision_where_it_imports():
    try:
        import torchvision.models as models
    except Exception as exc:  # the CUDA wheel beside CPU torch fails with RuntimeError
        pytest.skip(f"torchvision does not import here: {exc}")
    import torch

    for name in PARAMETERS:
        ours = {n: tuple(p.shape) for n, p in build_on_meta(name).named_parameters()}
        with torch.device("meta"):
            theirs = getattr(models, name)(weights=None)
        assert list(ours.items()) == [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]


def test_an_unknown_model_is_refused_with_the_known_names():
    with pytest.raises(UsageError, match="unknown model 'resnet51'.*resnet50, vgg16, alexnet"):
        check_model_name("resnet51")
    with pytest.raises(UsageError, match="unknown model"):
        bucket_plan("bert")


@needs_torch
def test_a_missing_torch_names_the_extra_to_install(monkeypatch):
    real_import = builtins.__import__

    def without_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_torch)
    with pytest.raises(UsageError, match=r"model vgg16 is built with torch: pip install 'osu-dl"):
        bucket_plan("vgg16")


def _bench(*argv: str):
    return command_config("bench", *argv)


def test_buckets_option_reaches_the_config():
    assert _bench("allreduce", "--buckets", "resnet50").buckets == "resnet50"
    assert _bench("allreduce").buckets is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bcast", "--buckets", "vgg16"], "expected bench allreduce, got bench bcast"),
        (["allreduce", "--buckets", "vgg16", "-m", "1M"], "expected no -m, got -m 1M"),
    ],
)
def test_buckets_refuses_options_that_contradict_it(argv, message):
    with pytest.raises(UsageError, match=message):
        _bench(*argv)
