"""The configurations ``train-bench`` compares, each in its isolation group: our trainer
with each eligible fixed allreduce algorithm (native among them) and with the tuned
selector, native and tuned also without overlap, tuned and cma also with the gradient
buckets in registered memory, and PyTorch DDP over Gloo (on GPUs, ``--device cuda``, also
DDP over NCCL, DDP's default there); and their trainers.

Isolation (as the sweep's): binding Gloo (DDP's process group, or the registry's ``gloo``
algorithm) starts threads that slow everything else timed in the same process on a small
machine (native allreduce at 8 B: 1.3 -> 61 us). So the configurations that bind Gloo form
the ``gloo`` isolation group, on GPUs those binding NCCL (its proxy threads) the ``nccl``
group, and every other one the ``mpi`` group, each measured in launches of its own; native
runs in every group, so each group has a common reference.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from collectives.units import split_variant_texts
from osu_dl_bench.jobs.plan import MPI_GROUP, group_of

DDP = "ddp-gloo"
DDP_NCCL = "ddp-nccl"
TUNED = "tuned"
# The choices `train --adapt --write-table` kept in training, bound as tuned's are.
ADAPTED = "tuned/adapted"
NATIVE = "native"
# The groups of the gloo and nccl backends, the names the sweep gives them
# (jobs.plan.group_of): DDP's process groups bind the same libraries, with the same threads.
GLOO_GROUP = "gloo"
NCCL_GROUP = "nccl"
GROUPS = (MPI_GROUP, GLOO_GROUP, NCCL_GROUP)  # every group, in the order reports list them


def groups_for(device: str) -> tuple[str, ...]:
    """The isolation groups train-bench launches on ``device`` (nccl on GPUs only)."""
    return GROUPS if device == "cuda" else (MPI_GROUP, GLOO_GROUP)


@dataclass(frozen=True)
class Configuration:
    """One measured configuration: its label, its isolation group, its trainer's options
    and policy (None: PyTorch DDP over ``ddp_backend``)."""

    label: str
    group: str
    cfg: Any
    policy: Any = None
    ddp_backend: str = "gloo"


def home_group(variants: Iterable[Any]) -> str:
    """The isolation group of a configuration whose calls may run any of ``variants``:
    a backend other than the MPI library's (its group) wins, since binding it once is
    enough to start its threads."""
    others = sorted({group_of(v) for v in variants} - {MPI_GROUP})
    return others[0] if others else MPI_GROUP


def in_launch(label: str, group_of_label: str, group: str | None) -> bool:
    """Whether a launch of ``group`` measures the configuration (native: in every group,
    the common reference; None: one launch measures every configuration)."""
    return group is None or group_of_label == group or label == NATIVE


def _fixed_policies(session) -> tuple[list[tuple[str, object, str]], list[str]]:
    """(label, policy, group) per eligible allreduce algorithm, and why the others are
    skipped. Nothing is bound yet: a policy binds when a trainer is built on it."""
    from collectives import algorithms
    from osu_dl_bench.train.policy import FixedPolicy, call_context

    device = session.policy.device
    ctx = call_context(session.topology, "allreduce", "float32", device)
    chosen, skipped = [], []
    for algorithm in algorithms("allreduce"):
        variant = algorithm.variant()
        reason = variant.ineligible_reason(ctx)
        if reason:
            skipped.append(f"{variant.label}: skipped: {reason}")
            continue
        # Bound for the run's buffers too (on GPUs nccl refuses a policy of cpu buffers).
        policy = FixedPolicy(
            session.comm, session.topology, {"allreduce": variant}, session.policy, device
        )
        chosen.append((variant.label, policy, group_of(variant)))
    return chosen, skipped


def _tuned_policy(session, cfg, table: str | None):
    """(the selector's policy over ``table``, "") or (None, why there is none)."""
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.train.policy import build_policy

    if not table:
        return None, "skipped: no tuning table given (--table); make one with osu-dl-bench tune"
    with_table = replace(cfg, table=table)
    try:
        policy = session.agree(lambda: build_policy(with_table, session.comm, session.topology))
    except UsageError as exc:
        return None, f"skipped: {exc}"
    return policy, ""


def selector_variants(selector, topology, device: str) -> list[Any]:
    """Every variant ``selector`` may choose for the trainer's collectives at this job's
    shape: forced, fixed, and every range of the table's entry (choices not registered
    here are left out: the selector runs native instead)."""
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.selection.selector import Query
    from osu_dl_bench.train.policy import TABLE_COLLECTIVES

    variants = [*selector.forced.values(), *selector.fixed.values()]
    for collective in TABLE_COLLECTIVES:
        if collective in selector.forced or collective in selector.fixed:
            continue
        query = Query(collective, topology.nprocs, 0, device, topology.nodes, topology.ppn)
        entry = selector.entry_for(query)
        for size_range in entry.ranges if entry is not None else ():
            try:
                variants.append(size_range.choice.variant(collective))
            except UsageError:
                continue
    return variants


def configurations(
    session, cfg, table: str | None, adapted: str | None = None
) -> tuple[list[Configuration], list[str]]:
    """Every configuration with its group (the same list in every launch), and why some
    are skipped; ``adapted``: the table `train --adapt --write-table` wrote, measured as
    ADAPTED beside tuned (None: not measured)."""
    from collectives import registered

    policies, skipped = _fixed_policies(session)
    for label, given in ((TUNED, table), (ADAPTED, adapted)):
        if label == ADAPTED and adapted is None:
            continue
        tuned, why = _tuned_policy(session, cfg, given)
        if tuned is not None:
            # A table that names Gloo anywhere at this shape binds it: the gloo group's then.
            variants = selector_variants(tuned.selector, session.topology, tuned.device)
            policies.append((label, tuned, home_group(variants)))
        else:
            skipped.append(f"{label}: {why}")
    configs = [Configuration(label, group, cfg, policy) for label, policy, group in policies]
    # Overlap costs a core while the communication thread polls; with as many ranks as
    # cores it may not pay, so native and tuned are measured without it too.
    no_overlap = replace(cfg, overlap=False)
    for label, policy, group in policies:
        if label in (NATIVE, TUNED):
            configs.append(Configuration(f"{label}/no-overlap", group, no_overlap, policy))
    # Gradient buckets in registered memory (--buffers cpu-registered): the same choices,
    # but cma reads the peers' buckets directly.
    if registered.unavailable_reason() is None:
        on_registered = replace(cfg, buffers="cpu-registered")
        serial = replace(on_registered, overlap=False)
        for label, policy, group in policies:
            if label.partition(":")[0] in (TUNED, "cma"):  # cma: its default variant
                configs.append(Configuration(f"{label}/registered", group, on_registered, policy))
                name = f"{label}/registered/no-overlap"
                configs.append(Configuration(name, group, serial, policy))
    else:
        skipped.append(f"registered buckets: skipped: {registered.unavailable_reason()}")
    configs.append(Configuration(DDP, GLOO_GROUP, cfg))
    if cfg.buffers == "cuda":
        from osu_dl_bench.train.policy import agreed_reason

        reason = session.thread.run(agreed_reason, session.comm, ddp_nccl_unavailable())
        if reason is None:
            configs.append(Configuration(DDP_NCCL, NCCL_GROUP, cfg, ddp_backend="nccl"))
        else:
            skipped.append(f"{DDP_NCCL}: skipped: {reason}")
    groups = groups_for(cfg.buffers)
    for config in configs:
        if config.group not in groups:
            skipped.append(f"{config.label}: skipped: binds {config.group}, no launches of its own")
    return [c for c in configs if c.group in groups], skipped


# The label suffixes train-bench gives a fixed algorithm's or tuned's other configurations.
SUFFIXES = ("", "/no-overlap", "/registered", "/registered/no-overlap")


def possible_labels() -> set[str]:
    """Every label a configuration may carry on some machine (this one's registry, the
    backends it lacks, native, tuned, DDP's), for --only before any job runs."""
    from collectives import algorithms
    from collectives.registry import UNAVAILABLE_BACKENDS

    bases = {NATIVE, TUNED, *UNAVAILABLE_BACKENDS}
    bases |= {a.variant().label for a in algorithms("allreduce")}
    return {base + suffix for base in bases for suffix in SUFFIXES} | {DDP, DDP_NCCL, ADAPTED}


def only_these(
    configs: list[Configuration], only: str | None
) -> tuple[list[Configuration], list[str]]:
    """The configurations named in ``only`` (labels as split_variant_texts splits them;
    None: all), native always (each group's reference), and a line per one left out and
    per one named that this machine cannot run (told apart from a typo before any job:
    possible_labels)."""
    if only is None:
        return configs, []
    wanted = set(split_variant_texts(only))
    kept = [c for c in configs if c.label in wanted or c.label == NATIVE]
    left = [f"{c.label}: not measured (--only)" for c in configs if c not in kept]
    here = {c.label for c in configs}
    left += [f"{label}: not measured: not available here" for label in sorted(wanted - here)]
    return kept, left


def ddp_nccl_unavailable() -> str | None:
    """Why DDP cannot run over NCCL on this rank (torch without NCCL, ranks sharing a GPU:
    collectives.device.gpu_sharing_reason, found when the GPU was chosen), else None."""
    import torch.distributed as dist

    from collectives.device import gpu_sharing_reason

    if not dist.is_nccl_available():
        return "torch.distributed has no NCCL here (torch.distributed.is_nccl_available())"
    return gpu_sharing_reason()


def build_trainers(session, cfg, data, configs: list[Configuration], device=None) -> dict:
    """The given configurations, each on its own replica of the same model (on ``device``:
    None, the CPU), state broadcast."""
    import torch

    from osu_dl_bench.train.ddp import DDPTrainer
    from osu_dl_bench.train.models import build_model
    from osu_dl_bench.train.trainer import DataParallelTrainer

    def model():
        torch.manual_seed(cfg.seed + session.rank)
        return build_model(cfg, data.shape).to(device or torch.device("cpu"))

    trainers = {}
    for config in configs:
        if config.policy is None:
            trainers[config.label] = DDPTrainer(model(), config.cfg, session, config.ddp_backend)
        else:
            on_policy = replace(session, policy=config.policy)
            trainers[config.label] = DataParallelTrainer(model(), config.cfg, on_policy)
    for trainer in trainers.values():
        trainer.broadcast_state(0)
    return trainers
