"""The sweep inside one MPI job: a job the orchestrator launched, doing what its typed
spec says (jobs.child, jobs.job_spec), or ``osu-dl-bench sweep --inside`` by hand; and
the planner.

For each process count p of --np, the first p ranks of the job measure every pending
(collective, size) point while the others wait without spinning; rank 0 appends each
point's rows to the run directory as soon as they are measured, so a killed job loses at
most the point in flight. Bad input raises UsageError on every rank (exit 2), and so
does a write to the run directory that fails (a full disk): rank 0 shares its error, so
no rank waits for it. A wrong result is stored as validation=fail and turns into exit 1
once every point is done.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from collectives import Variant, mpit
from collectives.device import needs_staging, select_local_gpu
from collectives.registry import BoundCalls, distinct_variants
from collectives.specs import SPECS
from osu_dl_bench.errors import UsageError, ValidationFailure
from osu_dl_bench.jobs import runinfo
from osu_dl_bench.jobs.job_spec import INSIDE, MEASURE, PLAN, JobSpec, Measurement
from osu_dl_bench.jobs.plan import (
    FILE_GROUP,
    MPI_GROUP,
    CollectivePlan,
    Done,
    JobPlan,
    LaunchSlot,
    SweepSetting,
    finished_points,
    forcing_proof,
    group_of,
    in_group,
    is_forced_group,
    job_plan,
    pending,
    plan_collectives,
    resolve_setting,
    sweep_groups,
)
from osu_dl_bench.jobs.progress import encode_event, plan_line, point_line, skipped_lines
from osu_dl_bench.jobs.sweep_config import SweepConfig, check_output_dir, check_run_dir
from osu_dl_bench.measurement import heartbeat
from osu_dl_bench.measurement.calibration import run_calibration
from osu_dl_bench.measurement.kernel import (
    BudgetTiming,
    delay_for,
    device_calls,
    measure_budget,
    prepare_inputs,
)
from osu_dl_bench.measurement.memory import check_node_memory, collective_need
from osu_dl_bench.measurement.ranks import SUMMARY_FIELDS, ClockSync, synchronise_clocks
from osu_dl_bench.measurement.reference import ReferenceTimer, outlying
from osu_dl_bench.measurement.schedule import candidate_budget, round_stats
from osu_dl_bench.measurement.store import (
    NORMAL,
    OUTLYING,
    REMEASURED,
    RunStore,
    SweepPoint,
    format_rounds,
)
from osu_dl_bench.runtime.metadata import COMMAND_KEY, RunMetadata, collect_metadata, utc_now
from osu_dl_bench.runtime.rank_agreement import agree_on_errors, on_rank0, wait_politely
from osu_dl_bench.runtime.topology import Topology, discover_topology


def sweep_points(
    device: str,
    setting: SweepSetting,
    plan: CollectivePlan,
    n: int,
    variants: list[Variant],
    timing: BudgetTiming,
    slot: LaunchSlot,
    state: str = NORMAL,
) -> list[SweepPoint]:
    """One record per candidate of a measured point (bandwidths from the median), with
    its rounds and the machine-state reference of each round."""
    spec, size, shape = plan.spec, n * setting.etype.itemsize, plan.shape
    copy_us, allreduce_us = (format_rounds(column * 1e6) for column in timing.reference.T)
    per_rank = [None] * len(variants) if timing.per_rank is None else list(timing.per_rank)
    points = []
    for variant, stats, wrong, rounds, ranks in zip(
        variants, round_stats(timing.times), timing.wrong, timing.round_us(), per_rank, strict=True
    ):
        seconds = stats.median_us * 1e-6
        algbw = spec.algbw_bytes(size, shape.nprocs) / seconds / 1e9 if seconds > 0 else 0.0
        points.append(
            SweepPoint(
                collective=spec.name,
                backend=variant.algorithm.backend,
                algorithm=variant.label,
                dtype=setting.etype.name,
                op=setting.op_name(spec),
                device=device,
                size_bytes=size,
                count=n,
                nprocs=shape.nprocs,
                nodes=shape.nodes,
                ppn=shape.ranks_per_node,
                rounds=timing.schedule.rounds,
                iterations=timing.schedule.iterations,
                algbw_gbs=algbw,
                busbw_gbs=algbw * spec.busbw_factor(shape.nprocs),
                validation="fail" if wrong else "pass",
                **asdict(stats),
                launch=slot.launch,
                group=slot.group,
                state=state,
                round_us=format_rounds(rounds),
                ref_copy_us=copy_us,
                ref_allreduce_us=allreduce_us,
                **_per_rank_fields(ranks),
            )
        )
    return points


def _per_rank_fields(table: np.ndarray | None) -> dict[str, str]:
    """SweepPoint's per-rank columns from a (ranks, SUMMARY_FIELDS) table ('' where this
    rank holds none)."""
    if table is None:
        return {}
    return {
        f"rank_{name}": format_rounds(table[:, SUMMARY_FIELDS.index(name)])
        for name in ("lag_us", "wait_us", "finish_us", "p99_us")
    }


# The share of the budget a backend's own launches get: they time two candidates (native
# and that backend), where the MPI library's launches time a dozen.
ISOLATED_SHARE = 0.2
# Points a launch measures before its typical machine state is known.
MIN_STATES = 2


class Reporter:
    """What rank 0 says: event lines for the orchestrator, or text for a person."""

    def __init__(self, comm: MPI.Comm, orchestrated: bool) -> None:
        self.enabled = comm.Get_rank() == 0
        self.orchestrated = orchestrated

    def line(self, text: str) -> None:
        """Print one line from rank 0."""
        if self.enabled:
            print(text, flush=True)

    def event(self, kind: str, **fields: Any) -> None:
        """Tell the orchestrator (nothing otherwise)."""
        if self.orchestrated:
            self.line(encode_event(kind, **fields))

    def job(self, plan: JobPlan) -> None:
        """Skipped algorithms once per job, and the job's point count."""
        if plan.launch == 1:  # the same in every launch: said once
            for text in skipped_lines(plan.nprocs, plan.skipped):
                self.line(text)
        self.event("plan", **asdict(plan))
        if not self.orchestrated:
            self.line(plan_line(asdict(plan)))

    def point(self, points: list[SweepPoint], seconds: float) -> None:
        """One measured point."""
        if self.orchestrated:
            self.event("point", nprocs=points[0].nprocs, seconds=round(seconds, 3))
        else:
            self.line(point_line(points, seconds))

    def failure(self, point: SweepPoint, wrong: int) -> None:
        """A wrong result, as bench reports it."""
        self.line(
            f"DATA VALIDATION ERROR: p={point.nprocs} {point.collective} ({point.algorithm}) "
            f"had {wrong} wrong elements on message size {point.size_bytes}"
        )


@dataclass
class Job:
    """One launch's state while it is swept: one process count, one isolation group."""

    comm: MPI.Comm
    measurement: Measurement
    setting: SweepSetting
    store: RunStore
    done: Done
    report: Reporter
    slot: LaunchSlot
    dry_run: bool = False  # --dry-run by hand: plan and say, measure nothing
    binder: BoundCalls = field(init=False)
    reference: ReferenceTimer = field(init=False)
    clock: ClockSync = field(init=False)
    # Per measured point: (plan, n, its median reference (copy, allreduce)), for the
    # machine-state check; the points found outlying wait to be measured again.
    states: list[tuple[CollectivePlan, int, np.ndarray]] = field(default_factory=list)
    outlying: list[tuple[CollectivePlan, int]] = field(default_factory=list)
    _started: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.binder = BoundCalls()  # each variant bound once per job
        self.reference = ReferenceTimer(self.comm)
        self.clock = synchronise_clocks(self.comm)  # once per launch (measurement.ranks)

    @property
    def budget(self) -> float:
        """Seconds of rounds per point in this launch: the point's budget shared by the
        launches; a backend's own group times native and that backend only, so it gets a
        fifth of that."""
        # The selection file's group times native alone, as the MPI group does then.
        share = 1.0 if self.slot.group in (MPI_GROUP, FILE_GROUP) else ISOLATED_SHARE
        return self.measurement.launch_budget * share

    def point_budget(self, plan: CollectivePlan, n: int, variants: list[Variant]) -> float:
        """This launch's seconds for ``variants`` at one point: their share of the point's
        budget among its candidates (twins removed), so a focused launch costs less."""
        every = distinct_variants(plan.eligible, plan.shape.nprocs, n, self.setting.etype.itemsize)
        return candidate_budget(self.budget, len(variants), len(every))

    def measure(self, plan: CollectivePlan, n: int) -> list[tuple[SweepPoint, int]]:
        """Measure the pending candidates of one point and store them; (point, wrong) pairs."""
        variants = pending(self.measurement, self.setting, plan, n, self.done, self.slot)
        if not variants:
            return []
        timing = self._time(plan, n, variants)
        state = self._state_of(plan, n, timing)
        return self._store(plan, n, variants, timing, state)

    def remeasure_outlying(self) -> list[tuple[SweepPoint, int]]:
        """Measure again, once, every point of this launch taken in an outlying machine
        state (the first points, checked before the launch had a typical state, too)."""
        typical = self._typical(len(self.states))
        if typical is not None:
            for plan, n, median in self.states[:MIN_STATES]:
                if outlying(median, typical) and (plan, n) not in self.outlying:
                    self.outlying.append((plan, n))
        results = []
        for plan, n in self.outlying:
            variants = self._all_variants(plan, n)
            timing = self._time(plan, n, variants)
            results += self._store(plan, n, variants, timing, REMEASURED)
        return results

    def _all_variants(self, plan: CollectivePlan, n: int) -> list[Variant]:
        """Every candidate of a point, stored or not (a re-measurement times them all)."""
        every = self.done.without_stored()
        return pending(self.measurement, self.setting, plan, n, every, self.slot)

    def _time(self, plan: CollectivePlan, n: int, variants: list[Variant]) -> BudgetTiming:
        setting = self.setting
        self._started = time.perf_counter()
        self.report.event(
            "measuring",
            collective=plan.spec.name,
            size_bytes=n * setting.etype.itemsize,
            candidates=len(variants),
        )
        # On cuda: this rank's GPU, and MPI algorithms staged where MPI is not CUDA-aware.
        calls = device_calls(self.comm, self.binder, variants, self.measurement.device)
        inputs = prepare_inputs(
            self.comm, plan.spec, setting.etype, setting.op_for(plan.spec), setting.xp, n
        )
        beat = heartbeat.current()
        beat.point(plan.spec.name, n * setting.etype.itemsize, [v.label for v in variants])
        budget = self.point_budget(plan, n, variants)
        timing = measure_budget(self.comm, calls, inputs, budget, self.reference, self.clock)
        beat.phase("between points")
        return timing

    def _typical(self, count: int) -> np.ndarray | None:
        """The launch's typical reference: the median over its first ``count`` points."""
        if count < MIN_STATES:
            return None
        return np.median(np.array([median for _, _, median in self.states[:count]]), axis=0)

    def _state_of(self, plan: CollectivePlan, n: int, timing: BudgetTiming) -> str:
        """NORMAL, or OUTLYING (and queued for re-measurement) when the point's reference
        exceeds the launch's typical one so far. The reference is the maximum across
        ranks, so every rank decides alike."""
        median = np.median(timing.reference, axis=0)
        typical = self._typical(len(self.states))
        self.states.append((plan, n, median))
        if typical is not None and outlying(median, typical):
            self.outlying.append((plan, n))
            return OUTLYING
        return NORMAL

    def _store(
        self,
        plan: CollectivePlan,
        n: int,
        variants: list[Variant],
        timing: BudgetTiming,
        state: str,
    ) -> list[tuple[SweepPoint, int]]:
        points = sweep_points(
            self.measurement.device, self.setting, plan, n, variants, timing, self.slot, state
        )
        on_rank0(self.comm, lambda: self.store.append(points))
        self.report.point(points, time.perf_counter() - self._started)
        return list(zip(points, timing.wrong, strict=True))


def _job_entry(
    world: MPI.Comm, topo: Topology, meta: RunMetadata, plan: JobPlan, **fields: Any
) -> dict[str, Any]:
    """The metadata of one process count's job."""
    return {
        "nprocs": topo.nprocs,
        "job_size": world.Get_size(),
        "nodes": topo.nodes,
        "ppn": topo.ppn,
        "emulated_nodes": topo.emulated,
        "hosts": list(topo.hostnames),
        "mpi_library": meta.mpi_library,
        "mpi_version": meta.mpi_version,
        "mpi4py_version": meta.mpi4py_version,
        "thread_level": meta.thread_level,
        "mpich_posix_cvars": meta.mpich_posix_cvars,
        COMMAND_KEY: meta.command,
        "points_planned": plan.points,
        "points_to_measure": plan.todo,
        "skipped": plan.skipped,
        **meta.device_facts,
        **runinfo.slurm_fields(),
        **fields,
    }


def _slots(spec: JobSpec, plans: list[CollectivePlan]) -> list[LaunchSlot]:
    """The launches this job measures: the one its spec names, or (a sweep run --inside
    by hand) launch 1 of every isolation group in turn, the MPI library's first, so the
    threads a later backend starts cannot slow the candidates measured before it."""
    groups = sweep_groups(spec.measure, plans)
    if spec.launch is None or spec.group is None:
        return [LaunchSlot(1, group) for group in groups]
    if spec.group not in groups:
        # Every rank of the count finds it alike: agreed, so the ranks waiting hear it too.
        raise UsageError(
            f"group {spec.group}: expected one of this sweep's groups ({', '.join(groups)})",
            agreed=True,
        )
    return [LaunchSlot(spec.launch, spec.group)]


def _sweep_one_count(
    world: MPI.Comm, comm: MPI.Comm, spec: JobSpec, setting: SweepSetting, **shared: Any
) -> list[tuple[SweepPoint, int]]:
    """Every pending point at this communicator's size, in each of its launch slots;
    returns the failed candidates."""
    topo = discover_topology(comm, spec.measure.emulated_ppn)
    agree_on_errors(comm, lambda: delay_for(comm))  # the test hook, checked once
    every = plan_collectives(spec.measure, setting, topo.shape)
    failures: list[tuple[SweepPoint, int]] = []
    for slot in _slots(spec, every):
        job = Job(comm, spec.measure, setting, slot=slot, **shared)
        failures += _sweep_launch(world, topo, job, spec.run_dir)
    return failures


def _sweep_launch(
    world: MPI.Comm, topo: Topology, job: Job, run_dir: str
) -> list[tuple[SweepPoint, int]]:
    """Every pending point of one launch slot; returns the failed candidates."""
    measure, setting, comm, slot = job.measurement, job.setting, job.comm, job.slot
    plans = plan_collectives(measure, setting, topo.shape, slot.group)
    plan = job_plan(measure, run_dir, setting, topo.nprocs, plans, job.done, slot)
    job.report.job(plan)
    if job.dry_run:
        return []
    # A forced group proves, before measuring, that the library runs its algorithm.
    forced = forcing_proof(plans, slot.group) if is_forced_group(slot.group) else {}
    meta, started = collect_metadata(topo, measure.device), utc_now()
    forced_fields = {
        **_forced_fields(forced),
        **_fingerprint_fields(comm, measure),
        "rank_nodes": list(topo.rank_nodes),
        "clock_residual_us": round(job.clock.residual * 1e6, 3),
    }
    entry = _job_entry(world, topo, meta, plan, started=started, **forced_fields)
    record = lambda entry: runinfo.record_job(job.store, topo.nprocs, entry, _slot_key(slot))  # noqa: E731
    on_rank0(comm, lambda: record(entry))
    if measure.calibrate and slot.group == MPI_GROUP and plan.todo:
        # The model's calibration kernels in the same launch as the points they predict
        # (its placement and machine state); a few seconds at most.
        heartbeat.current().phase("model calibration")
        run_calibration(comm, job.store.path, f"p{topo.nprocs}-launch{slot.launch}")
        heartbeat.current().phase("between points")
    results = []
    for cplan in plans:
        for n in cplan.counts:
            results.append(job.measure(cplan, n))
    results.append(job.remeasure_outlying())
    failures = [(point, wrong) for found in results for point, wrong in found if wrong]
    for point, wrong in failures:
        job.report.failure(point, wrong)
    entry = _job_entry(
        world,
        topo,
        meta,
        plan,
        started=started,
        finished=utc_now(),
        points_measured=sum(1 for found in results[:-1] if found),
        points_remeasured=len(job.outlying),
        # Threads of rank 0's process once measured: a backend's threads (gloo's) show
        # here, and must not show in the MPI library's group.
        threads=_thread_count(),
        **forced_fields,
        validation_failures=[{**_failure_key(p), "wrong_elements": wrong} for p, wrong in failures],
    )
    on_rank0(comm, lambda: record(entry))
    return failures


def _forced_fields(forced: dict[str, dict[str, str]]) -> dict[str, Any]:
    """A forced launch's metadata: each forcing variable, set and read back."""
    return {"forced_algorithm": forced} if forced else {}


def _fingerprint_fields(comm: MPI.Comm, measure: Measurement) -> dict[str, Any]:
    """verify-export's proof that the selection file took effect: the allreduce
    fingerprints of this launch at the sweep's sizes (mpit.fingerprints), in every group:
    the library's default, with the file, and each algorithm the file names, forced."""
    sizes = sorted({size for size in measure.sizes() if size >= 8})
    # A library sweep's launches load MPICH's selection files: their fingerprints are the
    # run-time half of each candidate's path proof (tune compares them with the default's).
    loads_files = bool(os.environ.get(mpit.MPICH_FILE_VARIABLES[0]))
    if not (measure.library_file or loads_files) or "allreduce" not in measure.collectives:
        return {}
    if not sizes:
        return {}
    return {"fingerprints": mpit.fingerprints(comm, sizes)}


def _thread_count() -> int | None:
    """Threads of this process (Linux's /proc; None where there is none)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _slot_key(slot: LaunchSlot) -> str:
    """How the metadata names a launch: 'LAUNCH/GROUP'."""
    return f"{slot.launch}/{slot.group}"


def _failure_key(point: SweepPoint) -> dict[str, Any]:
    return {k: getattr(point, k) for k in ("collective", "algorithm", "size_bytes")}


def _first_ranks(world: MPI.Comm, nprocs: int) -> MPI.Comm:
    """The first nprocs ranks of the job (COMM_NULL on the others)."""
    if nprocs == world.Get_size():
        return world
    rank = world.Get_rank()
    return world.Split(0 if rank < nprocs else MPI.UNDEFINED, rank)


def _share_stop(world: MPI.Comm, stopped: UsageError | None) -> None:
    """Raise, on every rank, the error that stopped a smaller process count (a full disk):
    the ranks that waited for it would otherwise wait for the next count forever. Rank 0
    takes part in every count, so it knows."""
    message = world.bcast(str(stopped) if stopped else None, root=0)
    if message:
        raise UsageError(message, agreed=True)


def _checked_setting(spec: JobSpec, world_size: int) -> SweepSetting:
    too_big = [p for p in spec.nprocs if p > world_size]
    if too_big:
        raise UsageError(f"--np {too_big[0]}: only {world_size} processes in this job")
    return resolve_setting(spec.measure)


def _check_memory(world: MPI.Comm, spec: JobSpec, setting: SweepSetting) -> None:
    """Refuse, on every rank, sizes whose buffers this node cannot hold at the largest
    --np (before the run directory is opened: nothing is half measured); on cuda, with the
    pinned mirrors of the candidates a launch stages at one point."""
    measure, itemsize, nprocs = spec.measure, setting.etype.itemsize, max(spec.nprocs)
    needs = []
    for name in measure.collectives:
        counts = measure.element_counts(name, itemsize)
        staged = _staged_per_point(measure.device, setting.variants[name])
        if counts:
            needs.append(
                collective_need(
                    SPECS[name], max(counts), nprocs, itemsize, measure.device, staged_calls=staged
                )
            )
    if needs:
        check_node_memory(world, needs, nprocs)


def _staged_per_point(device: str, variants: list[Variant]) -> int:
    """The most candidates one launch stages at a point (collectives.device): those its
    isolation group measures. Their calls are bound anew at every point, so each holds
    the receive mirror of that point's size alone."""
    staged = [v for v in variants if needs_staging(device, v.algorithm.backend)]
    groups = {group_of(v) for v in variants}
    return max((sum(in_group(v, group) for v in staged) for group in groups), default=0)


def _open_run_dir(
    world: MPI.Comm, by_hand: SweepConfig | None, store: RunStore, held: contextlib.ExitStack
) -> Done:
    """Rank 0 opens the run directory (a sweep run by hand, ``by_hand``, checks it first
    and holds its lock in ``held``; the orchestrator did both for its jobs); every rank
    gets the finished points."""
    dry_run = by_hand is not None and by_hand.dry_run

    def step() -> Done | None:
        if world.Get_rank() != 0:
            return None
        if by_hand is not None:
            if not dry_run:
                check_output_dir(by_hand)
                held.enter_context(store.lock())
            check_run_dir(by_hand)
        done = finished_points(store)
        if not dry_run:
            store.create()
            if by_hand is not None:
                session = runinfo.session_fields(by_hand, launcher="inside")
                runinfo.record_session(store, session)
        return done

    return world.bcast(agree_on_errors(world, step), root=0)


def run_inside(world: MPI.Comm, cfg: SweepConfig) -> int:
    """``sweep --inside`` by hand: sweep every --np count inside this job, launch 1 of
    every isolation group in turn; returns the exit code."""
    nprocs = cfg.nprocs or (world.Get_size(),)
    spec = JobSpec(INSIDE, cfg.output, nprocs, cfg.measure, cfg.launches)
    return _run_job(world, spec, cfg)


def run_spec(world: MPI.Comm, spec: JobSpec) -> int:
    """What a launched job's spec says (jobs.child): plan, or measure its launch."""
    if spec.role == PLAN:
        return run_plan(spec)
    if spec.role != MEASURE:
        raise UsageError(f"job spec role {spec.role!r}: a launched job plans or measures")
    return _run_job(world, spec, None)


def _run_job(world: MPI.Comm, spec: JobSpec, by_hand: SweepConfig | None) -> int:
    """Sweep the spec's counts in this job (by hand: with the checks and records the
    orchestrator makes for its jobs); returns the exit code."""
    dry_run = by_hand is not None and by_hand.dry_run
    setting = agree_on_errors(world, lambda: _checked_setting(spec, world.Get_size()))
    if spec.measure.device == "cuda" and not dry_run:
        # Chosen over the whole job once: the first point may run on a sub-communicator,
        # whose node-local ranks would not be the job's. Before the memory check, which
        # asks this GPU for its free memory.
        select_local_gpu(world)
    if not dry_run:
        _check_memory(world, spec, setting)
    store = RunStore(spec.run_dir)
    with contextlib.ExitStack() as held:
        done = _open_run_dir(world, by_hand, store, held)
        report = Reporter(world, orchestrated=by_hand is None)
        shared = {"store": store, "done": done, "report": report, "dry_run": dry_run}
        finish = by_hand is not None and not dry_run
        return _sweep_counts(world, spec, setting, shared, finish)


def _sweep_counts(
    world: MPI.Comm, spec: JobSpec, setting: SweepSetting, shared: dict[str, Any], finish: bool
) -> int:
    """Every --np count in turn, then the verdict (``finish``: and the run marked
    complete); returns the exit code."""
    report, store = shared["report"], shared["store"]
    failures: list[tuple[SweepPoint, int]] = []
    for nprocs in spec.nprocs:
        comm = _first_ranks(world, nprocs)
        stopped: UsageError | None = None
        # Sub-communicators are not freed: bound algorithms may still hold them.
        if comm != MPI.COMM_NULL:
            try:
                failures += _sweep_one_count(world, comm, spec, setting, **shared)
            except UsageError as exc:
                if not exc.agreed:
                    raise
                stopped = exc  # agreed by this count's ranks: the others must hear it too
        wait_politely(world)  # idle ranks must not steal the measured count's cores
        _share_stop(world, stopped)
    # Rank 0 took part in every process count, so its list is the whole story.
    failed = world.bcast(len(failures), root=0)
    report.event("done", failures=failed)
    if finish:
        for text in on_rank0(world, lambda: runinfo.finish_run(store, complete=True)) or []:
            report.line(text)
    if failed:
        raise ValidationFailure(
            f"DATA VALIDATION ERROR: {failed} results failed validation; they are "
            f"stored with validation=fail in {store.results_path}"
        )
    return 0


def run_plan(spec: JobSpec) -> int:
    """The planner: check the measurement against the registry and print each process
    count's expected plan as events (one process, no communication)."""
    measure = spec.measure
    setting = resolve_setting(measure)
    done = finished_points(RunStore(spec.run_dir))
    for shape in spec.shapes:
        groups = sweep_groups(measure, plan_collectives(measure, setting, shape))
        for launch in range(1, spec.launches + 1):
            for group in groups:
                plans = plan_collectives(measure, setting, shape, group)
                slot = LaunchSlot(launch, group)
                plan = job_plan(measure, spec.run_dir, setting, shape.nprocs, plans, done, slot)
                print(encode_event("plan", **asdict(plan)), flush=True)
    return 0
