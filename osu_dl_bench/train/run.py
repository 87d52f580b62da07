"""``osu-dl-bench train``: set up, train, report.

Order of events on every rank: open the session (private communicator, topology,
policy) -> check the batch split -> data, model, trainer (buckets bound through the
policy) -> resume from a checkpoint if asked -> broadcast rank 0's state -> train, with
epoch metrics, checkpoints and the fault hook -> throughput, communication and
validation summaries -> rank 0 prints and writes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from osu_dl_bench.errors import UsageError, ValidationFailure
from osu_dl_bench.paths import write_atomic
from osu_dl_bench.runtime.metadata import collect_metadata
from osu_dl_bench.train import checkpoint as ckpt
from osu_dl_bench.train.comm_hooks import wrong_allreduce_hook
from osu_dl_bench.train.comm_thread import CommThread
from osu_dl_bench.train.config import TrainConfig, check_output_paths
from osu_dl_bench.train.data import DataSplits, ShardedSampler, eval_shard, load_data
from osu_dl_bench.train.device import place
from osu_dl_bench.train.models import InputShape, build_model, has_batch_norm, parameter_count
from osu_dl_bench.train.progress import ProgressBar, progress_enabled
from osu_dl_bench.train.records import (
    EpochRecord,
    TrainSummary,
    ValidationRecord,
    comm_record,
    iteration_rates,
    throughput,
)
from osu_dl_bench.train.report import EPOCH_HEADER, epoch_line, footer_lines, header_lines
from osu_dl_bench.train.session import Session, thread_level_note, threads_may_call_mpi
from osu_dl_bench.train.trainer import DataParallelTrainer, StepStats, evaluate
from osu_dl_bench.train.validate import Divergence, Reference, compare, tolerance_for


@dataclass
class _Tally:
    """Running sums of this process's steps."""

    epoch: np.ndarray = field(default_factory=lambda: np.zeros(3))  # loss, correct, samples
    epoch_steps: int = 0
    epoch_seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    exposed: list[float] = field(default_factory=list)
    buckets: list[list[tuple[float, float, float]]] = field(default_factory=list)
    clock: str = "host"

    def add(self, stats: StepStats) -> None:
        self.epoch += (stats.loss_sum, stats.correct, stats.samples)
        self.epoch_steps += 1
        self.epoch_seconds += stats.seconds
        self.step_seconds.append(stats.seconds)
        self.busy.append(stats.comm.busy)
        self.exposed.append(stats.comm.exposed)
        self.buckets.append([(b.ready, b.start, b.end) for b in stats.comm.buckets])
        self.clock = stats.comm.clock

    def reset_epoch(self) -> None:
        self.epoch, self.epoch_steps, self.epoch_seconds = np.zeros(3), 0, 0.0


@dataclass
class _Run:
    """Everything the training loop touches."""

    cfg: TrainConfig
    session: Session
    data: DataSplits
    sampler: ShardedSampler
    trainer: DataParallelTrainer
    total_steps: int
    start_step: int = 0
    reference: Reference | None = None
    divergence: Divergence | None = None
    fault: tuple[int, int] | None = None
    bar: ProgressBar | None = None
    tally: _Tally = field(default_factory=_Tally)
    epochs: list[EpochRecord] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.session.rank


def _threads(cfg: TrainConfig, ppn: int) -> int:
    """torch intra-op threads: given, else this host's cores shared by its ranks."""
    return cfg.threads or max(1, (os.cpu_count() or 1) // max(ppn, 1))


def _say(run: _Run, *lines: str) -> None:
    if run.rank == 0:
        if run.bar is not None:
            run.bar.clear()
        print("\n".join(lines), flush=True)


def _model(cfg: TrainConfig, shape: InputShape) -> nn.Module:
    """The model in ``cfg.compute_dtype`` (float64 under --validate)."""
    return build_model(cfg, shape).to(getattr(torch, cfg.compute_dtype))


def _build(cfg: TrainConfig, session: Session) -> _Run:
    """Data, sampler, model and trainer (collective: binds the buckets' algorithms)."""
    cfg.local_batch(session.nprocs)  # UsageError on every rank alike (before any load)
    data = load_data(cfg)
    sampler = ShardedSampler(
        len(data.train), cfg.batch_size, session.nprocs, session.rank, cfg.seed
    )
    if sampler.steps_per_epoch == 0:
        raise UsageError(
            f"batch size {cfg.batch_size} exceeds the {len(data.train)} training samples"
        )
    # Seeded by rank, so replicas start different and the broadcast has work to do.
    torch.manual_seed(cfg.seed + session.rank)
    model = _model(cfg, data.shape).to(place(cfg.buffers, session))
    if cfg.validate and has_batch_norm(model):
        raise UsageError(
            f"--validate needs a model without batch norm (per-rank batch statistics "
            f"differ from 1-process ones): {cfg.model} has it; use --model cnn"
        )
    wrong = wrong_allreduce_hook(os.environ, cfg.validate)
    trainer = DataParallelTrainer(model, cfg, session, wrong)
    total = cfg.steps or cfg.epochs * sampler.steps_per_epoch
    fault = ckpt.parse_fault(os.environ.get(ckpt.FAULT_ENV, ""))
    return _Run(cfg, session, data, sampler, trainer, total, fault=fault)


def _meta(run: _Run, step: int) -> ckpt.CheckpointMeta:
    cfg = run.cfg
    return ckpt.CheckpointMeta(step, run.session.nprocs, cfg.batch_size, cfg.model, cfg.data)


def _prune_leftovers(run: _Run) -> None:
    """Rank 0 removes what an interrupted save left, before any rank saves again."""
    if run.rank == 0:
        removed = ckpt.prune_leftovers(run.cfg.checkpoint_dir)
        if removed:
            _say(run, f"# removed {removed} leftover(s) of an interrupted checkpoint save")
    run.session.barrier()


def _resume(run: _Run) -> None:
    """Load the newest checkpoint into the replica (every rank reads the same files)."""

    def load() -> tuple[int, dict] | None:
        path = ckpt.latest_checkpoint(run.cfg.checkpoint_dir)
        return None if path is None else ckpt.load_checkpoint(path, _meta(run, 0), run.rank)

    loaded = run.session.agree(load)
    if loaded is None:
        _say(run, f"# no checkpoint in {run.cfg.checkpoint_dir}: starting from step 0")
        return
    step, state = loaded
    run.trainer.model.load_state_dict(state["model"])  # copies into the flat views
    run.trainer.optimizer.load_state_dict(state["optimizer"])
    run.start_step = step


def _save(run: _Run, done: int) -> None:
    trainer = run.trainer

    def state() -> dict[str, Any]:
        return {"model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict()}

    ckpt.save_checkpoint(
        run.cfg.checkpoint_dir,
        _meta(run, done),
        run.rank,
        state,
        run.session.barrier,
        run.cfg.keep_checkpoints,
    )


def _end_epoch(run: _Run, done: int) -> None:
    """Sum the epoch's metrics over ranks, evaluate on the test set, print one line."""
    sums = run.tally.epoch.copy()
    run.session.allreduce_sum(sums)
    test_loss = test_acc = None
    if run.data.test is not None:
        indices = eval_shard(run.data.test, run.session.nprocs, run.rank)
        totals = evaluate(run.trainer.model, *run.data.test.take(indices))
        run.session.allreduce_sum(totals)
        test_loss, test_acc = totals[0] / totals[2], totals[1] / totals[2]
    record = EpochRecord(
        epoch=(done - 1) // run.sampler.steps_per_epoch + 1,
        steps=run.tally.epoch_steps,
        train_loss=float(sums[0] / sums[2]),
        train_accuracy=float(sums[1] / sums[2]),
        test_loss=test_loss,
        test_accuracy=test_acc,
        seconds=run.tally.epoch_seconds,
    )
    run.epochs.append(record)
    _say(run, epoch_line(record))
    run.tally.reset_epoch()


def _train(run: _Run) -> None:
    """The loop over global steps ``start_step .. total_steps``."""
    cfg, spe = run.cfg, run.sampler.steps_per_epoch
    for step in range(run.start_step, run.total_steps):
        stats = run.trainer.step(*run.data.train.take(run.sampler.local_indices(step)))
        run.tally.add(stats)
        done = step + 1
        if run.bar is not None:
            run.bar.update(done, stats.loss_sum / stats.samples)
        if cfg.validate:
            _validation_step(run, step)
        if cfg.checkpoint_every and done % cfg.checkpoint_every == 0:
            _save(run, done)
        ckpt.maybe_fault(run.fault, run.rank, done)
        if done % spe == 0 or done == run.total_steps:
            _end_epoch(run, done)


def _validation_steps(run: _Run) -> int:
    return min(run.cfg.validate_steps, run.total_steps - run.start_step)


def _compare(run: _Run) -> None:
    """Collective: every replica against rank 0's reference, which is then freed."""
    run.divergence = compare(run.session, run.reference, run.trainer.model)
    run.reference = None


def _validation_step(run: _Run, step: int) -> None:
    """Rank 0: the 1-process step on the global batch; all: compare after N steps."""
    if step + 1 - run.start_step > _validation_steps(run):
        return
    if run.reference is not None:
        run.reference.step(*run.data.train.take(run.sampler.global_indices(step)))
    if step + 1 - run.start_step == _validation_steps(run):
        _compare(run)


def _validation(run: _Run) -> ValidationRecord | None:
    """The comparison's verdict (every rank holds it)."""
    d = run.divergence
    if d is None:
        return None
    tolerance = tolerance_for(run.cfg, d.scale)
    steps, dtype = _validation_steps(run), run.cfg.compute_dtype
    return ValidationRecord(d.max_abs_diff, tolerance, steps, d.rank, d.where, dtype)


def _describe(run: _Run, threads: int) -> TrainSummary:
    """The part of the summary known before training (the header lines show it)."""
    topo, data = run.session.topology, run.data
    return TrainSummary(
        config=asdict(run.cfg),
        nprocs=run.session.nprocs,
        nodes=topo.nodes,
        ppn=topo.ppn,
        model=run.cfg.model,
        parameters=parameter_count(run.trainer.model),
        data=data.name,
        train_samples=len(data.train),
        test_samples=len(data.test) if data.test is not None else 0,
        threads=threads,
        start_step=run.start_step,
        total_steps=run.total_steps,
        buckets=[asdict(p) for p in run.trainer.bucket_plans],
        bcasts=[asdict(p) for p in run.trainer.bcast_plans],
        policy_note=getattr(run.session.policy, "note", ""),
    )


def _bucket_sums(steps: list[list[tuple[float, float, float]]], count: int) -> np.ndarray:
    """Per bucket [ready, start, end] summed over ``steps`` (buckets x 3; zeros if none)."""
    sums = np.zeros((count, 3))
    for step in steps:
        sums += np.array(step).reshape(count, 3)
    return sums


def _complete(run: _Run, described: TrainSummary, bcast_seconds: float) -> TrainSummary:
    """Add epochs, throughput, communication and validation (collective: gathers)."""
    cfg, session, tally = run.cfg, run.session, run.tally
    local = cfg.local_batch(session.nprocs, session.rank)
    seconds = np.array(tally.step_seconds)
    rates = iteration_rates(seconds, local, cfg.warmup_steps, cfg.batches_per_iter)
    timed = slice(cfg.warmup_steps, None)
    busy, exposed = sum(tally.busy[timed]), sum(tally.exposed[timed])
    sums = np.array([busy, exposed, seconds[timed].sum(), len(seconds[timed])])
    session.allreduce_sum(sums)
    buckets = _bucket_sums(tally.buckets[timed], len(run.trainer.bucket_plans))
    session.allreduce_sum(buckets.reshape(-1))  # 1-D, as the registry's algorithms take
    return replace(
        described,
        epochs=run.epochs,
        throughput=throughput(session.allgather(rates), cfg.batches_per_iter, local),
        communication=comm_record(sums, session.nprocs, bcast_seconds, tally.clock, buckets),
        validation=_validation(run),
        metadata=collect_metadata(session.topology).as_dict(),
    )


def _write_outputs(run: _Run, summary: TrainSummary) -> None:
    """Rank 0: the JSON summary and the final parameters, each written atomically."""
    cfg = run.cfg
    if run.rank != 0:
        return
    if cfg.json:
        write_atomic(
            Path(cfg.json), lambda p: p.write_text(json.dumps(summary.as_dict(), indent=1))
        )
        print(f"# wrote {cfg.json}", flush=True)
    if cfg.save_params:
        state = run.trainer.model.state_dict()
        write_atomic(Path(cfg.save_params), lambda p: torch.save(state, p))
        print(f"# wrote {cfg.save_params}", flush=True)


def _start(run: _Run) -> float:
    """Resume if asked, broadcast rank 0's state, start the reference; bcast seconds."""
    cfg = run.cfg
    if cfg.checkpoint_every or cfg.resume:
        _prune_leftovers(run)
    if cfg.resume:
        _resume(run)
    seconds = run.trainer.broadcast_state(root=0)
    if cfg.validate and run.rank == 0:
        build = partial(_model, cfg, run.data.shape)
        run.reference = Reference(cfg, build, run.trainer.model, run.trainer.optimizer)
    if cfg.validate and _validation_steps(run) == 0:
        _compare(run)  # resumed at the end: the broadcast state is what is checked
    return seconds


def _execute(world: Any, cfg: TrainConfig, thread: CommThread, notes: Sequence[str]) -> int:
    session = Session.open(world, cfg, thread)
    # Before training, so that an unwritable --json does not lose a finished run.
    session.agree(lambda: check_output_paths(cfg, session.rank))
    threads = _threads(cfg, session.topology.ppn)
    torch.set_num_threads(threads)
    run = _build(cfg, session)
    bcast_seconds = _start(run)
    run.bar = ProgressBar(run.total_steps, progress_enabled(cfg.progress, run.rank))
    described = _describe(run, threads)
    _say(run, *notes, *header_lines(described), EPOCH_HEADER)
    _train(run)
    summary = _complete(run, described, bcast_seconds)
    _say(run, *footer_lines(summary))
    _write_outputs(run, summary)
    session.close()
    v = summary.validation
    if v is not None and not v.passed:
        raise ValidationFailure(
            f"VALIDATION FAILED: parameters differ from 1-process training by "
            f"{v.max_abs_diff:.3g} > tolerance {v.tolerance:.3g} (rank {v.rank}, "
            f"{v.parameter}, after {v.steps} steps in {v.dtype})"
        )
    return 0


def run_train(world: Any, cfg: TrainConfig, notes: Sequence[str] = ()) -> int:
    """Train under the current MPI job (every rank calls this; ``notes``: lines rank 0
    prints first); returns the exit code."""
    inline = not threads_may_call_mpi()
    if inline:  # every rank alike: the level is the job's
        cfg, notes = replace(cfg, overlap=False), [*notes, thread_level_note()]
    with CommThread(inline) as thread:
        code = _execute(world, cfg, thread, notes)
    sys.stdout.flush()
    return code
