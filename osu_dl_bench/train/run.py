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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from osu_dl_bench.errors import UsageError, ValidationFailure
from osu_dl_bench.paths import os_reason, write_atomic
from osu_dl_bench.runtime.metadata import COMMAND_KEY, collect_metadata, command_line
from osu_dl_bench.selection.table import EntryKey, TuningTable
from osu_dl_bench.train import checkpoint as ckpt
from osu_dl_bench.train.check import (
    SETTLED_STEP,
    CheckCost,
    CheckPlan,
    CheckRecord,
    SizeVerdict,
    call_durations,
    candidate_labels,
    judge_size,
    predictions,
    size_groups,
    step_verdict,
    trained_table,
    variant_of,
)
from osu_dl_bench.train.comm_hooks import (
    GradReduce,
    check_slow_names_a_candidate,
    slow_candidate_hook,
    wrong_allreduce_hook,
)
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
class _Check:
    """The table check's plan, its candidates' bound reductions per bucket, and (once it
    ran) its verdicts per bucket size."""

    plan: CheckPlan
    reduces: list[list[GradReduce]]
    verdicts: list[SizeVerdict] = field(default_factory=list)
    switched: list[dict[str, Any]] = field(default_factory=list)
    trained: TuningTable | None = None  # --write-table: written after the summary

    @property
    def last_step(self) -> int:
        return self.plan.first_step + self.plan.steps


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
    check: _Check | None = None

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
    slow = slow_candidate_hook(os.environ, cfg.validate, cfg.checks_table)
    trainer = DataParallelTrainer(model, cfg, session, wrong, slow)
    total = cfg.steps or cfg.epochs * sampler.steps_per_epoch
    fault = ckpt.parse_fault(os.environ.get(ckpt.FAULT_ENV, ""))
    return _Run(cfg, session, data, sampler, trainer, total, fault=fault)


def _plan_check(run: _Run) -> None:
    """--check-table: each bucket's candidates, bound (collective: the same labels in the
    same order on every rank, all from the agreed table); the steps it needs must fit."""
    cfg, trainer, policy = run.cfg, run.trainer, run.session.policy
    first = run.start_step + cfg.warmup_steps
    labels, dtypes = [], []
    for plan, nbytes, scratch in zip(
        trainer.bucket_plans, trainer.selection_bytes, trainer.scratches, strict=True
    ):
        entry = policy.decision("allreduce", nbytes, scratch.dtype.name).entry
        labels.append(candidate_labels(plan.algorithm, entry, nbytes))
        dtypes.append(scratch.dtype.name)
    need = CheckPlan(first, tuple(labels), cfg.seed).steps
    if first + need > run.total_steps:
        raise UsageError(
            f"--check-table needs {cfg.warmup_steps} warm-up steps and {need} check steps "
            f"after step {run.start_step}: the run has {run.total_steps - run.start_step} "
            f"(--steps {first + need} or more)"
        )

    def bind() -> list[list[tuple[str, Any]]]:
        bound = [
            [(label, policy.bind("allreduce", variant_of(label), dtype)) for label in names]
            for names, dtype in zip(labels, dtypes, strict=True)
        ]
        # An ineligible candidate (the same on every rank: judged on the job's shape) drops.
        return [[(label, b) for label, b in pairs if b is not None] for pairs in bound]

    bound = run.session.thread.run(bind)
    plan = CheckPlan(first, tuple(tuple(name for name, _ in pairs) for pairs in bound), cfg.seed)
    check_slow_names_a_candidate(trainer.slow, plan.labels)
    reduces = [[trainer.reduce_of(index, b) for _, b in pairs] for index, pairs in enumerate(bound)]
    run.check = _Check(plan, reduces)


def _check_step(run: _Run, step: int) -> None:
    """Before global step ``step``: during the check, each bucket's candidate of the step."""
    check = run.check
    if check is None or not check.plan.covers(step):
        return
    at = step - check.plan.first_step
    run.trainer.install(
        [options[check.plan.candidate(at, b)] for b, options in enumerate(check.reduces)]
    )


def _end_check(run: _Run, step: int) -> None:
    """After the check's last step: the verdicts (every rank: the fastest rank's times,
    rank 0's verdicts), then the kept choices (--adapt) or the table's from here on."""
    check = run.check
    if check is None or step + 1 != check.last_step:
        return
    plan, session = check.plan, run.session
    lo = plan.first_step - run.start_step
    local = call_durations(run.tally.buckets[lo : lo + plan.steps])
    # The fastest rank's time: the others' include waiting for the last one's backward
    # (compute's skew, not the algorithm's; a sweep's barrier removes it before each call).
    durations = session.allgather(local).min(axis=0)
    verdicts = None
    if run.rank == 0:
        key = _entry_key(run)
        groups = size_groups(plan, run.trainer.selection_bytes)
        verdicts = [
            judge_size(key, plan, durations, buckets, size, {}) for size, buckets in groups.items()
        ]
    check.verdicts = session.thread.run(session.comm.bcast, verdicts, 0)
    if not run.cfg.adapt:
        run.trainer.install(run.trainer.table_reduces)
        return
    kept = {b: v.kept for v in check.verdicts for b in v.buckets}
    reduces = [options[plan.labels[b].index(kept[b])] for b, options in enumerate(check.reduces)]
    run.trainer.install(reduces)
    check.switched = [
        {"nbytes": v.nbytes, "buckets": v.buckets, "from": v.table_choice, "to": v.kept}
        for v in check.verdicts
        if v.kept != v.table_choice
    ]
    for b, label in kept.items():
        plan_b = run.trainer.bucket_plans[b]
        if label != plan_b.algorithm:
            run.trainer.bucket_plans[b] = replace(plan_b, algorithm=label, how="adapted")


def _entry_key(run: _Run) -> EntryKey:
    """The table entry key of this job's gradient allreduce."""
    t = run.session.topology
    return EntryKey("allreduce", run.session.policy.device, t.nodes, t.ppn, t.nprocs)


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
        _check_step(run, step)
        stats = run.trainer.step(*run.data.train.take(run.sampler.local_indices(step)))
        run.tally.add(stats)
        _end_check(run, step)
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
        buckets=[asdict(p) for p in run.trainer.bucket_plans],  # --adapt may have switched
        check=_check_record(run),
        epochs=run.epochs,
        throughput=throughput(session.allgather(rates), cfg.batches_per_iter, local),
        communication=comm_record(sums, session.nprocs, bcast_seconds, tally.clock, buckets),
        validation=_validation(run),
        metadata=collect_metadata(session.topology).as_dict(),
    )


def _mean_over_ranks(run: _Run, values: Sequence[float]) -> np.ndarray:
    """Each value's mean over the ranks (collective)."""
    sums = np.array(values, dtype=float)
    run.session.allreduce_sum(sums)
    return sums / run.session.nprocs


def _check_cost_and_after(run: _Run) -> tuple[CheckCost, float | None, float | None]:
    """The check's steps against as many plain steps right after and before it, and busy
    and exposed ms per step after it (None: no step after it); collective."""
    check, tally = run.check, run.tally
    lo = check.plan.first_step - run.start_step
    n = check.plan.steps
    during = tally.step_seconds[lo : lo + n]
    after = tally.step_seconds[lo + n : lo + 2 * n]
    before = tally.step_seconds[lo - n : lo] if lo - n >= SETTLED_STEP else []
    rest = slice(lo + n, None)
    steps_after = len(tally.busy[rest])
    # Per step, each rank's seconds (0 where a side has no steps), as every rank has them.
    padded = [list(side) + [0.0] * (n - len(side)) for side in (during, after, before)]
    means = _mean_over_ranks(
        run, [*padded[0], *padded[1], *padded[2], sum(tally.busy[rest]), sum(tally.exposed[rest])]
    )
    check_steps, after_steps, before_steps = means[:n], means[n : 2 * n], means[2 * n : 3 * n]
    sides = [
        steps for steps, side in ((after_steps, after), (before_steps, before)) if len(side) == n
    ]
    cost = CheckCost.of(
        n,
        float(check_steps.sum()),
        float(after_steps.sum()) if len(after) == n else None,
        float(before_steps.sum()) if len(before) == n else None,
        list(check_steps - np.mean(sides, axis=0)) if sides else [],
    )
    if not steps_after:
        return cost, None, None
    return cost, 1e3 * means[-2] / steps_after, 1e3 * means[-1] / steps_after


def _check_record(run: _Run) -> CheckRecord | None:
    """The check's report with its cost and the table's predictions (collective; rank 0
    holds the predictions, the table it writes and the lines it prints)."""
    check = run.check
    if check is None or not check.verdicts:
        return None
    cost, busy, exposed = _check_cost_and_after(run)
    if run.rank != 0:
        return None
    cfg, trainer = run.cfg, run.trainer
    policy = run.session.policy
    table = policy.selector.table  # the table the run selects with, read once at start-up
    entry = policy.decision("allreduce", trainer.selection_bytes[0]).entry
    wanted = {v.nbytes: [c.label for c in v.candidates] for v in check.verdicts}
    found, source = predictions(table, None if entry is None else entry.key, wanted)
    verdicts = [
        replace(
            v,
            candidates=[
                replace(c, predicted_us=found[v.nbytes].get(c.label)) for c in v.candidates
            ],
        )
        for v in check.verdicts
    ]
    # Buckets launch in index order: the last one is reduced once backward has ended.
    last_bucket = len(trainer.buckets) - 1
    record = CheckRecord(
        check.plan.first_step,
        check.plan.steps,
        check.plan.seed,
        _clock_name(run.tally.clock),
        source,
        verdicts,
        step_verdict(verdicts, last_bucket, exposed, busy),
        cost,
        cfg.adapt,
        check.switched,
        cfg.write_table,
    )
    if cfg.write_table:
        provenance = _training_provenance(run)
        check.trained = trained_table(table, _entry_key(run), verdicts, provenance)
    return record


def _clock_name(clock: str) -> str:
    return "the host's clock" if clock == "host" else "CUDA events on the communication stream"


def _training_provenance(run: _Run) -> dict[str, Any]:
    """Where a table of choices kept in training comes from: model, buckets, steps, job."""
    cfg, t, plan = run.cfg, run.session.topology, run.check.plan
    return {
        "model": cfg.model,
        "parameters": parameter_count(run.trainer.model),
        "batch_size": cfg.batch_size,
        "buckets": [{"index": i, "nbytes": n} for i, n in enumerate(run.trainer.selection_bytes)],
        "check_steps": [plan.first_step, plan.first_step + plan.steps],
        "seed": cfg.seed,
        "nprocs": t.nprocs,
        "nodes": t.nodes,
        "ppn": t.ppn,
        "device": run.session.policy.device,
        "source_table": cfg.table,
        COMMAND_KEY: command_line(),
    }


def _write_outputs(run: _Run, summary: TrainSummary) -> None:
    """Rank 0: the JSON summary, the final parameters and the table of the choices kept in
    training, each written atomically, the summary first (a later file that cannot be
    written loses no measurement); a file that cannot be written is a UsageError naming
    its option (run under Session.agree: every rank exits with it)."""
    cfg = run.cfg
    if run.rank != 0:
        return
    if cfg.json:
        text = json.dumps(summary.as_dict(), indent=1)
        _write("--json", cfg.json, lambda p: write_atomic(p, lambda tmp: tmp.write_text(text)))
    if cfg.save_params:
        state = run.trainer.model.state_dict()
        _write(
            "--save-params", cfg.save_params, lambda p: write_atomic(p, partial(torch.save, state))
        )
    trained = run.check.trained if run.check is not None else None
    if trained is not None:
        _write("--write-table", cfg.write_table, trained.write, " (the choices kept in training)")


def _write(option: str, path: str, write: Callable[[Path], Any], what: str = "") -> None:
    """``write(path)``, then '# wrote PATH'; an OSError (a full disk) is a UsageError."""
    try:
        write(Path(path))
    except OSError as exc:
        raise UsageError(f"{option} {path}: not written: {os_reason(exc)}") from None
    print(f"# wrote {path}{what}", flush=True)


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
    if cfg.checks_table:
        _plan_check(run)
    bcast_seconds = _start(run)
    run.bar = ProgressBar(run.total_steps, progress_enabled(cfg.progress, run.rank))
    described = _describe(run, threads)
    _say(run, *notes, *header_lines(described), EPOCH_HEADER)
    _train(run)
    summary = _complete(run, described, bcast_seconds)
    _say(run, *footer_lines(summary))
    session.agree(lambda: _write_outputs(run, summary))
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
