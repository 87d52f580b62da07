"""The ``model train`` report: predicted against measured step time at the measured p, the
scaling predicted on a named interconnect, and the strategies' first estimates."""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from collectives.shape import JobShape
from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.model.platform import Platform
from osu_dl_bench.train.oracle import (
    bucket_seconds,
    build_network,
    measure_compute,
    model_stats,
    predict_step,
    strategy_estimates,
)

# train-bench configurations -> (allreduce variant or None for the fastest, overlap).
_NOT_MODELLED = ("gloo", "ddp-gloo")


@dataclass(frozen=True)
class TrainReportRequest:
    """What ``model train`` reports on: the workload (train-bench's JSON overrides it),
    the measured p and the scaling to predict."""

    model: str
    batch_size: int
    depth: int
    width: int
    image_size: int
    num_classes: int
    np: int
    threads: int | None
    measured: str | None
    scale_np: str
    scale_ppn: int


def _measured(path: str | None) -> tuple[dict, dict[str, float]]:
    """(config, label -> median img/s) of a train-bench JSON, or empty."""
    if not path:
        return {}, {}
    try:
        data = json.loads(Path(path).read_text())
        config, rows = data["config"], data["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--measured {path}: expected train-bench's JSON: {exc}") from None
    groups = data.get("groups") or {}
    by_label: dict[str, list[float]] = {}
    for row in rows:
        if groups and row.get("group") not in (None, groups.get(row["config"])):
            continue  # a reference measured beside another group (native in gloo's launches)
        by_label.setdefault(row["config"], []).append(float(row["img_per_s"]))
    return config, {k: statistics.median(v) for k, v in by_label.items()}


def _train_config(request: TrainReportRequest, measured: dict):
    from osu_dl_bench.train.config import TrainConfig

    pick = lambda key, default: measured.get(key) or default  # noqa: E731
    return TrainConfig(
        model=pick("model", request.model),
        data="synthetic",
        batch_size=int(pick("batch_size", request.batch_size)),
        depth=int(pick("depth", request.depth)),
        width=int(pick("width", request.width)),
        image_size=int(pick("image_size", request.image_size)),
        num_classes=int(pick("num_classes", request.num_classes)),
    )


def _variant_of(label: str) -> tuple[str | None, bool] | None:
    """train-bench's label ('tuned/registered/no-overlap') -> (allreduce variant,
    overlap); None if not modelled. Registered buckets are costed as private ones (the
    model's cma formula is the kernel-copy path)."""
    base, *suffixes = label.split("/")
    if base in _NOT_MODELLED:
        return None
    return (None if base == "tuned" else base), "no-overlap" not in suffixes


def _comparison(platform, compute, stats, nprocs, measured, batch) -> tuple[list[str], list]:
    layout = JobShape(nprocs, 1, nprocs)
    labels = list(measured) or ["native", "native/no-overlap", "tuned"]
    lines = [
        f"{'config':<38}{'predicted ms':>13}{'(comm, exposed)':>18}{'measured ms':>13}"
        f"{'accuracy':>10}"
    ]
    accuracies = []
    for label in labels:
        spec = _variant_of(label)
        meas = batch / measured[label] * 1e3 if label in measured else None
        if spec is None:
            lines.append(f"{label:<38}{'not modelled':>13}{'':>18}{_ms(meas):>13}")
            continue
        algorithm, overlap = spec
        comm = bucket_seconds(platform, layout, stats.bucket_bytes, algorithm)
        step = predict_step(compute, stats.bucket_bytes, comm, overlap, nprocs)
        acc = None if meas is None else 1 - abs(step.step * 1e3 - meas) / meas
        if acc is not None:
            accuracies.append(acc)
        parts = f"({step.comm * 1e3:.2f}, {step.exposed * 1e3:.2f})"
        lines.append(
            f"{label:<38}{step.step * 1e3:>13.2f}{parts:>18}{_ms(meas):>13}"
            f"{'' if acc is None else f'{100 * acc:9.1f}%':>10}"
        )
    return lines, accuracies


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _scaling(scale: Platform, compute, stats, nps: list[int], ppn: int, local: int) -> list[str]:
    lines = [
        f"{'p':>6}{'nodes':>7}{'compute ms':>12}{'comm ms':>10}{'exposed ms':>12}"
        f"{'step ms':>10}{'img/s total':>13}{'efficiency':>12}"
    ]
    base = None
    for nprocs in nps:
        layout = JobShape.packed(nprocs, ppn)
        comm = bucket_seconds(scale, layout, stats.bucket_bytes, None)
        step = predict_step(compute, stats.bucket_bytes, comm, True, nprocs)
        rate = local * nprocs / step.step
        base = base or rate / nprocs
        lines.append(
            f"{nprocs:>6}{layout.nodes:>7}{compute.total * 1e3:>12.2f}{step.comm * 1e3:>10.2f}"
            f"{step.exposed * 1e3:>12.2f}{step.step * 1e3:>10.2f}{rate:>13.0f}"
            f"{100 * compute.total / step.step:>11.1f}%"
        )
    return lines


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"


def _strategies(stats, nps: list[int], local: int, height: int) -> list[str]:
    lines = [f"{'p':>6}  {'strategy':<10}{'memory/rank':>16}{'comm/step/rank':>16}  note"]
    for nprocs in nps:
        for est in strategy_estimates(stats, nprocs, local * nprocs):
            # Spatial parallelism splits image rows: more ranks than rows cannot be used.
            note = "p > image rows" if est.strategy == "spatial" and nprocs > height else ""
            lines.append(
                f"{nprocs:>6}  {est.strategy:<10}{_mib(est.memory_bytes):>16}"
                f"{_mib(est.comm_bytes):>16}  {note}".rstrip()
            )
    return lines


def train_report(request: TrainReportRequest, platform: Platform, scale: Platform) -> str:
    """The whole report (text)."""
    from osu_dl_bench.train.models import InputShape

    config, measured = _measured(request.measured)
    cfg = _train_config(request, config)
    nprocs = int(config.get("np") or request.np)
    local = cfg.local_batch(nprocs)
    threads = request.threads or max(1, (os.cpu_count() or 1) // nprocs)
    shape = InputShape(3, cfg.image_size, cfg.num_classes)
    net = build_network(cfg, shape)
    stats = model_stats(net, shape, cfg)
    compute = measure_compute(net, shape, local, threads)
    nps = [int(x) for x in request.scale_np.split(",") if x.strip()]
    lines, accuracies = _comparison(platform, compute, stats, nprocs, measured, cfg.batch_size)
    mean = statistics.mean(accuracies) if accuracies else float("nan")
    buckets = ", ".join(format_size(b) for b in stats.bucket_bytes)
    return "\n".join(
        [
            f"# model {cfg.model} depth {cfg.depth} width {cfg.width}, {cfg.image_size}px, "
            f"{stats.param_bytes // 4:,} parameters; buckets {buckets}",
            f"# compute measured once on 1 rank, local batch {local}, {threads} torch threads: "
            f"forward {compute.forward * 1e3:.2f} ms, backward {compute.backward * 1e3:.2f} ms, "
            f"optimizer {compute.optimizer * 1e3:.2f} ms",
            f"# communication predicted on platform {platform.name}; "
            f"measured: {request.measured or 'none'}",
            f"## step time at p={nprocs}: predicted (compute + exposed communication) vs measured",
            *lines,
            "",
            f"## weak scaling on {scale.name} ({'ASSUMED' if scale.assumed else 'measured'}: "
            f"{scale.source}), {request.scale_ppn} ranks per node, local batch {local}, fastest "
            "predicted allreduce per bucket, overlap as the trainer does",
            *_scaling(scale, compute, stats, nps, request.scale_ppn, local),
            "",
            "## first estimates per strategy (Kahira et al. 2021), weak scaling (global batch "
            f"{local} x p): memory per rank (weights, gradients, momentum, activations) and "
            "bytes sent per rank per step",
            *_strategies(stats, [nprocs, *nps], local, cfg.image_size),
            "",
            f"mean step-time accuracy at p={nprocs}: "
            + ("-" if mean != mean else f"{100 * mean:.1f}%"),
        ]
    )
