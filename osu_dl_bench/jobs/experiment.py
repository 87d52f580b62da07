"""Experiments whose jobs each hand back one launch record (train-bench, the scripts'
benchmark and validation matrices), run by the one engine (``orchestrate.run_experiment``)
into a run directory. No MPI here.

The run directory is held (its lock) for the whole experiment. Its metadata.json names the
experiment and its options, the sessions, the launch order and its seed (replayed by a
resumed session); each launch's record is kept under ``jobs[P].launches['LAUNCH/GROUP']``
as soon as its job ends, and its collective points, if it has any, are appended to
results.csv, so ``merge``, ``tune``, ``compare`` and ``plot`` read them as a sweep's. A
resumed session (``--resume``) runs only the launches without a complete record.

A launch's rows are written before its record, and the record marks it done: a session
stopped between the two leaves rows without a record, which the next session removes
before it runs that launch again, so a resume after a kill at any moment neither loses
nor repeats rows. The run directory is opened once, by its resolved path: ``--out x``,
``--out ./x/`` and its absolute path are the same run.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osu_dl_bench import __version__
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import runinfo
from osu_dl_bench.jobs.orchestrate import (
    Experiment,
    JobKey,
    JobOutcome,
    launch_order,
    run_experiment,
)
from osu_dl_bench.jobs.progress import Progress
from osu_dl_bench.measurement.store import RunStore, SweepPoint
from osu_dl_bench.runtime.metadata import COMMAND_KEY, command_line, utc_now

# A record's collective points, as SweepPoint fields: appended to results.csv, not kept in
# the metadata.
POINTS = "points"
# A record that says it is not complete (a job that ended early) is run again on resume.
COMPLETE = "complete"


@dataclass(frozen=True)
class RecordedExperiment:
    """An experiment of launch records: its name and options (a resume must repeat them),
    its run directory (and the option that names it, for messages), process counts,
    launches per group, isolation groups, and whether the groups are shuffled within each
    launch (False: they run in the order given)."""

    name: str
    config: dict[str, Any]
    output: str
    option: str
    nprocs: tuple[int, ...]
    launches: int
    groups: tuple[str, ...]
    resume: bool = False
    shuffle: bool = True
    seed: int | None = None


@dataclass(frozen=True)
class Recorded:
    """What the experiment gave: its exit code, the seed and order of its launches, and
    each launch's record in that order (launches without one are left out)."""

    code: int
    seed: int
    order: list[JobKey]
    records: list[dict[str, Any]]


@dataclass(frozen=True)
class Turn:
    """One job's turn: the job, where its rank 0 leaves the launch's record as JSON
    (nothing there: no record), and its place in the order (1-based, of ``total``)."""

    job: JobKey
    part: Path
    index: int
    total: int


# The measurement of one launch: it runs the turn's job and says how it ended.
Launch = Callable[[Turn], JobOutcome]
# A record's collective points for results.csv, where the record does not hold them.
Points = Callable[[dict[str, Any]], list[SweepPoint]]


def job_label(job: JobKey) -> str:
    """How the metadata names a launch: 'LAUNCH/GROUP'."""
    return f"{job[1]}/{job[2]}"


def kept_records(store: RunStore) -> dict[JobKey, dict[str, Any]]:
    """The launch records stored so far, by job."""
    jobs = store.read_metadata().get("jobs", {})
    kept = {}
    for count, entry in jobs.items():
        for label, record in (entry.get("launches") or {}).items():
            launch, _, group = label.partition("/")
            kept[(int(count), int(launch), group)] = record
    return kept


def _check_resumable(
    store: RunStore, spec: RecordedExperiment, config: dict[str, Any]
) -> dict[JobKey, dict]:
    """The stored records a session may build on: none in a new directory; with --resume,
    those of the same experiment with the same options, ``config`` (UsageError otherwise)."""
    metadata = store.read_metadata()
    kept = kept_records(store)
    where = f"{spec.option} {spec.output}"
    if not kept and "experiment" not in metadata:
        if store.results_path.exists() or metadata.get("jobs"):
            raise UsageError(f"{where}: holds another run's results; choose a new directory")
        return {}
    if metadata.get("experiment") != spec.name:
        raise UsageError(f"{where}: not a {spec.name} run directory; choose a new directory")
    if not spec.resume:
        raise UsageError(
            f"{where} already holds {len(kept)} launches of {spec.name}: add --resume to "
            "continue it, or choose a new directory"
        )
    stored = _naming_run_dir(metadata.get("config", {}), spec, store.path)
    if stored != config:
        changed = sorted(k for k in {**config, **stored} if config.get(k) != stored.get(k))
        raise UsageError(
            f"--resume: {spec.output} was measured with other options ({', '.join(changed)}); "
            "give the same options, or choose a new directory"
        )
    return kept


def _run_dir_key(spec: RecordedExperiment) -> str:
    """The options' key of the option that names the run directory ('--out': 'out')."""
    return spec.option.lstrip("-").replace("-", "_")


def _naming_run_dir(config: Any, spec: RecordedExperiment, run_dir: Path) -> dict[str, Any]:
    """``config`` with the option that names the run directory (if it holds one) as the
    folder opened, so the same folder spelled otherwise is not another option."""
    config = dict(config) if isinstance(config, dict) else {}
    key = _run_dir_key(spec)
    if isinstance(config.get(key), str):
        config[key] = str(run_dir)
    return config


def _seed(store: RunStore, spec: RecordedExperiment) -> int:
    """The first session's seed (a resume replays its order), else --seed, else random."""
    orders = store.read_metadata().get("launch_orders") or []
    if orders and isinstance(orders[0], dict) and isinstance(orders[0].get("seed"), int):
        return orders[0]["seed"]
    return spec.seed if spec.seed is not None else random.SystemRandom().randrange(2**32)


def _order(spec: RecordedExperiment, seed: int) -> list[JobKey]:
    """Launch 1 of every count and group, then launch 2, ... (groups shuffled by ``seed``
    within each, unless the experiment keeps them in order)."""
    keys = [
        (count, launch, group)
        for count in spec.nprocs
        for launch in range(1, spec.launches + 1)
        for group in spec.groups
    ]
    if not spec.shuffle:
        return sorted(keys, key=lambda key: (key[1], spec.nprocs.index(key[0])))
    return launch_order(spec.launches, spec.nprocs, keys, seed)


def _session(spec: RecordedExperiment, config: dict[str, Any]) -> dict[str, Any]:
    """The metadata of this invocation (its options as ``config``)."""
    return {
        "experiment": spec.name,
        "config": config,
        "package_version": __version__,
        COMMAND_KEY: command_line(),
        "date": utc_now(),
        "launcher": "mpiexec",
        "nprocs": list(spec.nprocs),
        **runinfo.slurm_fields(),
    }


def _keep(store: RunStore, job: JobKey, record: dict[str, Any], points: Points | None) -> None:
    """Store one launch's record, its points first: the record marks the launch done, so
    a session stopped between the two leaves rows that ``_drop_unrecorded_rows`` removes
    before the launch runs again. The record's own POINTS go to results.csv only."""
    given = [SweepPoint(**point) for point in record.pop(POINTS, [])]
    if record.get(COMPLETE, True):
        found = points(record) if points is not None else given
        _check_points_of(job, found)
        if found:
            store.append(found)
    runinfo.record_job(store, job[0], record, job_label(job))


def _check_points_of(job: JobKey, points: list[SweepPoint]) -> None:
    """A launch's points name its process count, launch and group: by them a resumed
    session finds the rows of a launch whose record was never stored."""
    for point in points:
        if (point.nprocs, point.launch, point.group) != job:
            raise ValueError(
                f"a point of launch {job_label(job)} at p={job[0]} says launch "
                f"{point.launch}/{point.group} at p={point.nprocs}"
            )


def _drop_unrecorded_rows(store: RunStore, pending: set[JobKey]) -> None:
    """Remove from results.csv the rows of the ``pending`` launches (none with a complete
    record): rows a stopped session wrote before it could store their record, which the
    launch's rerun writes again."""
    if not pending:
        return
    dropped = store.drop_rows(lambda row: _job_of(row) in pending)
    if dropped:
        print(
            f"osu-dl-bench: note: {store.results_path}: removed {dropped} "
            f"row{'s' * (dropped != 1)} of launches whose record was not stored (a session "
            "stopped between the two); those launches run again",
            file=sys.stderr,
            flush=True,
        )


def _job_of(row: dict[str, str]) -> JobKey | None:
    """The launch a results row belongs to (None for a row that names none)."""
    try:
        return int(row["nprocs"]), int(row["launch"]), row["group"]
    except (KeyError, ValueError):
        return None


def run_recorded(
    spec: RecordedExperiment, launch: Launch, points: Points | None = None
) -> Recorded:
    """Run the experiment's pending launches through the engine, each job's record kept in
    the run directory as soon as it ends; the records of every launch, in order. A job
    that stops the experiment raises orchestrate.JobFailed (what was kept stays)."""
    run_dir = Path(spec.output).resolve()  # one folder, however the option spelled it
    config = _naming_run_dir(spec.config, spec, run_dir)
    store = RunStore(run_dir)
    with store.lock(command_line(), spec.option):
        kept = _check_resumable(store, spec, config)
        seed = _seed(store, spec)
        order = _order(spec, seed)
        runinfo.record_session(store, _session(spec, config))
        runinfo.record_launch_order(store, seed, [f"p{p} {k}/{g}" for p, k, g in order])
        todo = {job: 0 if kept.get(job, {}).get(COMPLETE, job in kept) else 1 for job in order}
        _drop_unrecorded_rows(store, {job for job in order if todo[job]})

        def run(job: JobKey, progress: Progress) -> JobOutcome:
            """One launch: its record, if it left one, kept before the next starts."""
            part = store.path / f".launch-p{job[0]}-{job[1]}-{job[2]}.json"
            part.unlink(missing_ok=True)
            try:
                outcome = launch(Turn(job, part, order.index(job) + 1, len(order)))
                if part.exists():
                    _keep(store, job, json.loads(part.read_text()), points)
            finally:
                with contextlib.suppress(OSError):
                    part.unlink()
            return outcome

        ended = run_experiment(
            Experiment(str(run_dir), order, todo, run, lambda *_: None, progress=False)
        )
        kept = kept_records(store)
    records = [kept[job] for job in order if job in kept]
    return Recorded(ended.code, seed, order, records)
