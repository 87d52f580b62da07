"""Text lines of a training run (rank 0 prints them), built from its records."""

from __future__ import annotations

from collections import Counter
from typing import Any

from collectives.units import format_size
from osu_dl_bench.train.check import check_lines
from osu_dl_bench.train.records import EpochRecord, TrainSummary

EPOCH_HEADER = (
    f"# {'epoch':>5} {'steps':>6} {'train_loss':>11} {'train_acc':>10} "
    f"{'test_loss':>10} {'test_acc':>9} {'time(s)':>8}"
)


def _size(nbytes: int) -> str:
    if nbytes >= 1 << 20:
        return f"{nbytes / (1 << 20):.1f}M"
    if nbytes >= 1 << 10:
        return f"{nbytes / (1 << 10):.1f}K"
    return f"{nbytes}B"


def _algorithms(plans: list[dict[str, Any]]) -> str:
    """'ring:seg=256K x2 (table), native x1 (table)'."""
    counts = Counter((p["algorithm"], p["how"]) for p in plans)
    return ", ".join(f"{alg} x{n} ({how})" for (alg, how), n in counts.items())


def _dtype(cfg: dict[str, Any]) -> str:
    if cfg.get("validate"):
        return "float64 (--validate: buckets planned and chosen by their float32 sizes)"
    return "float32"


def header_lines(s: TrainSummary) -> list[str]:
    """What is trained, how it is split and which algorithms carry it."""
    cfg = s.config
    base, extra = divmod(cfg["batch_size"], s.nprocs)
    # batch_share: the first `extra` ranks take one sample more.
    local = f"{base + 1} on {extra} rank(s), {base} on the others" if extra else f"{base}"
    test = f", {s.test_samples} test" if s.test_samples else ""
    sizes = ", ".join(f"{_size(b['nbytes'])} {b['algorithm']}" for b in s.buckets)
    lines = [
        f"# osu-dl-bench train: {s.model} ({s.parameters:,} parameters) on {s.data} "
        f"({s.train_samples} train{test}), p={s.nprocs} ({s.nodes} node(s) x {s.ppn} ppn)",
        f"# global batch {cfg['batch_size']} ({local} per rank), steps {s.start_step}.."
        f"{s.total_steps}, SGD lr {cfg['lr']} momentum {cfg['momentum']}, "
        f"torch threads {s.threads}, {_dtype(cfg)}",
        f"# start-up bcast: {_algorithms(s.bcasts)}",
        f"# {len(s.buckets)} gradient bucket(s) in reverse parameter order "
        f"(cap {format_size(cfg['bucket_cap'])}, first {format_size(cfg['first_bucket'])}), "
        f"in {cfg.get('buffers', 'cpu')} memory, each with its allreduce: {sizes}",
        f"# allreduce: {_algorithms(s.buckets)}; overlap {'on' if cfg['overlap'] else 'off'}, "
        f"fp16 compression {'on' if cfg['fp16_compress'] else 'off'}",
    ]
    if s.policy_note:
        lines.append(f"# {s.policy_note}")
    if s.start_step:
        lines.append(f"# resumed after step {s.start_step}")
    return lines


def epoch_line(e: EpochRecord) -> str:
    """One row under EPOCH_HEADER."""
    test_loss = "-" if e.test_loss is None else f"{e.test_loss:.4f}"
    test_acc = "-" if e.test_accuracy is None else f"{100 * e.test_accuracy:.2f}%"
    return (
        f"  {e.epoch:>5} {e.steps:>6} {e.train_loss:>11.4f} {100 * e.train_accuracy:>9.2f}% "
        f"{test_loss:>10} {test_acc:>9} {e.seconds:>8.2f}"
    )


def _clock(name: str) -> str:
    if name == "host":
        return "the host's clock"
    return "CUDA events on the compute and communication streams"


def footer_lines(s: TrainSummary) -> list[str]:
    """Throughput, communication and validation."""
    lines = []
    t = s.throughput
    if t is None:
        lines.append("# img/s: not enough steps after warm-up for one timing iteration")
    else:
        lines += [
            f"# img/s per rank: {t.per_rank_mean:.1f} +- {t.per_rank_ci:.1f} "
            f"(mean +- 1.96 std over {t.iterations} iterations of {t.batches_per_iter} steps "
            f"x {s.nprocs} ranks)",
            f"# img/s total:    {t.total_mean:.1f} +- {t.total_ci:.1f}",
        ]
    c = s.communication
    if c is not None:
        hidden = "n/a" if c.hidden_fraction is None else f"{100 * c.hidden_fraction:.1f}%"
        lines.append(
            f"# communication per step: {c.busy_ms:.2f} ms reducing gradients, "
            f"{c.exposed_ms:.2f} ms exposed, {hidden} hidden behind backward "
            f"(step {c.step_ms:.2f} ms; start-up bcast {c.bcast_ms:.2f} ms; "
            f"timed with {_clock(c.clock)})"
        )
    if s.check is not None:
        lines += check_lines(s.check)
    v = s.validation
    if v is not None:
        lines.append(
            f"# validation: max |p-rank - 1-process parameter| = {v.max_abs_diff:.3g} after "
            f"{v.steps} steps in {v.dtype} (rank {v.rank}, {v.parameter}; tolerance "
            f"{v.tolerance:.3g}): {'PASS' if v.passed else 'FAIL'}"
        )
    return lines
