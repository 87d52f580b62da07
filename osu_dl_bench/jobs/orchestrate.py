"""``osu-dl-bench sweep`` without --inside: plan, then launch one MPI job per process count
and follow its progress. This process never loads MPI: a process that has initialised
MPI cannot reliably start other MPI jobs, and under Slurm it would be a task of its own.

Sequence: MPI-free checks here; a one-process planner checks the rest against the
registry and counts the points; then each job runs in turn, doing what its typed spec
says (jobs.job_spec, written into the run directory's jobs/ folder), its rank 0
appending results and printing event lines that drive the progress bar. A job's
validation failures do not stop the sweep (exit 1 at the end); a job that dies stops it,
keeping every point stored so far for --resume. The run directory's lock is held from
before its results are read until the sweep ends, so a second sweep into it is refused.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import launch, runinfo, slurm, stalls
from osu_dl_bench.jobs.job_spec import MEASURE, PLAN, JobSpec, spec_path, write_spec
from osu_dl_bench.jobs.launch import (
    check_not_in_mpi_job,
    expected_shape,
    job_command,
    job_environment,
    planner_command,
)
from osu_dl_bench.jobs.progress import Progress, decode_event, format_duration, plan_lines
from osu_dl_bench.jobs.stalls import StallReport
from osu_dl_bench.jobs.sweep_config import (
    BatchOptions,
    SweepConfig,
    check_local_process_counts,
    check_output_dir,
    check_run_dir,
)
from osu_dl_bench.measurement import heartbeat
from osu_dl_bench.measurement.store import LOCK, RunLock, RunStore, StoreError
from osu_dl_bench.paths import os_reason, write_text_atomic
from osu_dl_bench.runtime.launcher import OVERSUBSCRIBED_CVARS
from osu_dl_bench.runtime.metadata import command_line, utc_now

# The planner imports the registry (and torch, for Gloo): slow, but never minutes.
PLANNER_TIMEOUT = 600.0


class JobFailed(Exception):
    """A child process ended with an exit code that stops the sweep."""

    def __init__(self, code: int) -> None:
        super().__init__(f"exit code {code}")
        self.code = code


# The sweep's exit code where the planner ended with 1 (a traceback), not wrong results.
PLANNER_CRASHED = 3

# A job: (process count, launch, isolation group).
JobKey = tuple[int, int, str]


def planner_spec(cfg: SweepConfig) -> JobSpec:
    """The planner's orders: the sweep's measurement in the shape each count's job is
    expected to get."""
    ppn = cfg.measure.emulated_ppn
    shapes = tuple(expected_shape(cfg.launching, nprocs, ppn) for nprocs in cfg.nprocs)
    launches = cfg.planned_launches()
    return JobSpec(PLAN, _run_dir(cfg), cfg.nprocs, cfg.measure, launches, shapes=shapes)


def measuring_spec(cfg: SweepConfig, job: JobKey) -> JobSpec:
    """The orders of the job that measures one launch of one group at one process count."""
    nprocs, launch_number, group = job
    launches = cfg.planned_launches()
    return JobSpec(MEASURE, _run_dir(cfg), (nprocs,), cfg.measure, launches, launch_number, group)


def _run_dir(cfg: SweepConfig) -> str:
    """The run directory as the jobs get it: absolute (a job may start elsewhere)."""
    return str(Path(cfg.output).resolve())


def run_planner(cfg: SweepConfig) -> dict[JobKey, dict[str, Any]]:
    """Each job's plan event; its errors reach stderr once, from the planner. Ctrl-C (or
    SIGTERM, SIGHUP) while it plans: one line, JobFailed(130), the planner stopped. Its
    spec goes to a temporary folder: the run directory may not exist yet (--dry-run
    makes none)."""
    try:
        with _terminate_as_interrupt(), tempfile.TemporaryDirectory() as folder:
            spec = write_spec(planner_spec(cfg), Path(folder) / "plan.json")
            proc = launch.run(
                planner_command(spec),
                PLANNER_TIMEOUT,
                env=job_environment(cfg.launching, 1, cfg.measure.emulated_ppn),
                stderr=None,
            )
    except KeyboardInterrupt:
        # launch.run has stopped the planner's process group on the way out.
        print(
            "\ninterrupted while planning the launches: nothing was measured",
            file=sys.stderr,
            flush=True,
        )
        raise JobFailed(130) from None
    except subprocess.TimeoutExpired:
        print(
            f"osu-dl-bench: error: the planner did not finish within {PLANNER_TIMEOUT:g} s",
            file=sys.stderr,
        )
        raise JobFailed(1) from None
    if proc.returncode != 0:
        if proc.returncode != 2:  # a usage error explained itself
            print(
                "osu-dl-bench: error: the planner (a one-rank job that plans the launches) "
                f"ended with exit code {proc.returncode}; nothing was measured"
                f"{_library_settings_note()}",
                file=sys.stderr,
                flush=True,
            )
        # 1 is the suite's code for wrong results; a planner that crashed measured nothing.
        raise JobFailed(PLANNER_CRASHED if proc.returncode == 1 else proc.returncode)
    events = (decode_event(line) for line in proc.stdout.splitlines())
    return {job_key(e): e for e in events if e and e["event"] == "plan"}


def job_key(plan: dict[str, Any]) -> JobKey:
    """The job a plan event is about."""
    return plan["nprocs"], plan["launch"], plan["group"]


def launch_order(
    launches: int, nprocs: Sequence[int], keys: list[JobKey], seed: int
) -> list[JobKey]:
    """The order the jobs run in: launch 1 of every process count, then launch 2, ...;
    within each, the isolation groups shuffled, so no backend always runs first (the
    machine drifts) and each backend's launch k runs beside the MPI library's launch k."""
    rng = random.Random(seed)
    order = []
    for index in range(1, launches + 1):
        for count in nprocs:
            groups = [key for key in keys if key[:2] == (count, index)]
            rng.shuffle(groups)
            order += groups
    return order


@dataclass
class JobOutcome:
    """How a job ended: its exit code, whether it finished its points, the point it was
    measuring when it stalled (None if it did not), what its ranks' heartbeats said
    then (None without heartbeats) and whether it was stopped at its time limit."""

    code: int
    finished: bool
    failures: int
    stalled_at: str | None = None
    stall: StallReport | None = None
    over_limit: bool = False


class _JobLines:
    """What a sweep job's output lines mean: ordinary lines pass through, events drive the
    progress bar; the point being measured and the job's 'done' event are kept."""

    def __init__(self, job: JobKey, progress: Progress) -> None:
        self.job, self.progress = job, progress
        self.measuring = "start-up"
        self.done: dict[str, Any] | None = None

    def take(self, line: str) -> None:
        """Act on one line of the job's output."""
        event = decode_event(line.rstrip("\n"))
        if event is None:
            self.progress.clear()
            sys.stdout.write(line)
            sys.stdout.flush()
        elif event["event"] == "plan":
            self.progress.replan(self.job, event["todo"])
        elif event["event"] == "measuring":
            # A sweep names its point; other experiments say what they measure.
            what = event.get("what")
            self.measuring = what or f"{event['collective']} {event['size_bytes']} B"
        elif event["event"] == "point":
            self.progress.advance()
        elif event["event"] == "done":
            self.done = event


def follow_job(
    proc: subprocess.Popen,
    job: JobKey,
    progress: Progress,
    stall_timeout: float,
    heartbeats: Path | None = None,
    limit: float | None = None,
) -> JobOutcome:
    """Pass a job's ordinary lines through, turn its events into progress, and stop it if
    it reports nothing for ``stall_timeout`` seconds (a hung algorithm must not hang the
    sweep), after reporting what its ranks' heartbeats in ``heartbeats`` say, or once it
    has run ``limit`` seconds (None: no limit)."""
    lines = _JobLines(job, progress)
    reports: list[StallReport] = []

    def report_stall() -> None:
        if heartbeats is None:
            return
        report = stalls.check_links(stalls.sample(heartbeats, job[0]))
        reports.append(report)
        progress.clear()
        print(
            f"osu-dl-bench: the job for {_job_text(job)} reported nothing for "
            f"{stall_timeout:g} s while measuring {lines.measuring}; its ranks' heartbeats:",
            *(f"  {line}" for line in report.lines()),
            sep="\n",
            file=sys.stderr,
            flush=True,
        )

    ended = launch.follow(proc, stall_timeout, lines.take, report_stall, limit)
    if ended.over_limit:
        return JobOutcome(ended.code, False, 0, over_limit=True)
    if ended.stalled:
        stall = reports[0] if reports else None
        return JobOutcome(ended.code, False, 0, stalled_at=lines.measuring, stall=stall)
    done = lines.done
    return JobOutcome(ended.code, done is not None, done["failures"] if done else 0)


def _job_text(job: JobKey) -> str:
    """'--np 4 (launch 1, mpi)'."""
    return f"--np {job[0]} (launch {job[1]}, {job[2]})"


# Where the jobs' heartbeats go, in the run directory: one folder per job while it runs.
HEARTBEATS = "heartbeats"


class Heartbeats:
    """The jobs' heartbeat folders in the run directory. Where one cannot be made (an
    unwritable directory, a full disk), one warning says so and the sweep's jobs run
    without heartbeats: a stall is then reported without its ranks' steps."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.root = Path(run_dir).resolve() / HEARTBEATS
        self.failed = False

    def make(self, job: JobKey) -> Path | None:
        """The job's folder, with a file per rank (None: no heartbeats)."""
        if self.failed:
            return None
        folder = self.root / f"p{job[0]}-{job[1]}-{job[2]}"
        try:
            heartbeat.create_files(folder, job[0])
        except OSError as exc:
            self.failed = True
            self.remove(folder)
            print(
                f"osu-dl-bench: warning: the jobs run without heartbeats (cannot write "
                f"{exc.filename or folder}: {os_reason(exc)}): a stall will be reported "
                "without its ranks' steps",
                file=sys.stderr,
                flush=True,
            )
            return None
        return folder

    def remove(self, folder: Path | None) -> None:
        """A job's folder once the job has ended, and the heartbeats' own once empty."""
        if folder is None:
            return
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.root.rmdir()


def run_job(
    cfg: SweepConfig,
    job: JobKey,
    progress: Progress,
    forced: dict[str, str] | None = None,
    heartbeats: Heartbeats | None = None,
) -> JobOutcome:
    """Launch one job (a process count's launch of one group) and follow it until it ends;
    ``forced``: the variables that force a library algorithm's group (the planner's);
    ``heartbeats``: where its ranks keep theirs (None: they keep none)."""
    how = cfg.launching
    env = job_environment(how, job[0], cfg.measure.emulated_ppn, forced)
    spec = _write_job_spec(measuring_spec(cfg, job), spec_path(cfg.output, *job))
    command = job_command(how, job[0], spec)
    return run_followed(command, env, job, progress, how.stall_timeout, heartbeats)


def _write_job_spec(spec: JobSpec, path: Path) -> Path:
    """Write a job's spec into the run directory (kept there: it says what the job was
    asked); a StoreError if it cannot be written (a full disk)."""
    try:
        return write_spec(spec, path)
    except OSError as exc:
        raise StoreError(f"cannot write {path} ({exc.strerror or exc})") from None


def run_followed(
    cmd: list[str],
    env: dict[str, str],
    job: JobKey,
    progress: Progress,
    stall_timeout: float,
    heartbeats: Heartbeats | None = None,
    limit: float | None = None,
) -> JobOutcome:
    """Start ``cmd`` as ``job`` with its ranks' heartbeats in a folder of ``heartbeats``
    (None: none) and follow it until it ends, stopping it, with a stall report, if it
    writes nothing for ``stall_timeout`` seconds, or once it has run ``limit`` seconds."""
    folder = heartbeats.make(job) if heartbeats is not None else None
    if folder is not None:
        env = {**env, heartbeat.DIRECTORY_ENV: str(folder)}
    try:
        proc = launch.start(cmd, env=env)
        return follow_job(proc, job, progress, stall_timeout, folder, limit)
    finally:
        if heartbeats is not None:
            heartbeats.remove(folder)


def _record_stall(cfg: SweepConfig, job: JobKey, outcome: JobOutcome) -> None:
    """Keep the stall report in the run directory's metadata. The stall is the error to
    report: if this fails as well (a full disk), it is only mentioned."""
    if outcome.stall is None:
        return
    entry = {
        "nprocs": job[0],
        "launch": job[1],
        "group": job[2],
        "date": utc_now(),
        "stall_timeout_s": cfg.launching.stall_timeout,
        "measuring": outcome.stalled_at,
        "summary": outcome.stall.summary(),
        **outcome.stall.record(),
    }
    _second_record(
        lambda: runinfo.record_stall(RunStore(cfg.output), entry), "record the stall report"
    )


def _second_record(write: Callable[[], object], what: str) -> None:
    """Write a record after an error was reported: if this fails as well (the same full
    disk), it is only mentioned, so the first error stays the one reported."""
    try:
        write()
    except UsageError as second:
        failure = second.failure if isinstance(second, StoreError) else second
        print(f"osu-dl-bench: note: could not also {what}: {failure}", file=sys.stderr, flush=True)


def _explain_failure(cfg: SweepConfig, job: JobKey, outcome: JobOutcome) -> None:
    """One message for a job that stopped the sweep (a usage error explained itself)."""
    if outcome.stall is not None:
        what = (
            f"reported nothing for {cfg.launching.stall_timeout:g} s while measuring "
            f"{outcome.stalled_at} and was stopped: {outcome.stall.summary()}"
        )
    elif outcome.stalled_at is not None:
        what = (
            f"reported nothing for {cfg.launching.stall_timeout:g} s while measuring "
            f"{outcome.stalled_at} (a hung algorithm? leave it out with -a) and was stopped"
        )
    elif outcome.code != 2:
        what = f"ended with exit code {outcome.code} before finishing"
    else:
        return
    print(
        f"osu-dl-bench: error: the job for {_job_text(job)} {what}; the points measured so "
        f"far are kept in {cfg.output}: rerun with --resume{_library_settings_note()}",
        file=sys.stderr,
        flush=True,
    )


# The environment prefixes through which users tune MPICH and Open MPI: a value the library
# does not know ends MPI_Init with only the library's own terse words (MPICH: "Other MPI
# error").
LIBRARY_SETTING_PREFIXES = ("MPIR_CVAR_", "OMPI_MCA_", "PRTE_MCA_")


def _library_settings_note() -> str:
    """The MPI library settings the user's environment holds, as a hint for a job that
    died without a usage error ('' when there are none)."""
    given = sorted(
        f"{name}={value}"
        for name, value in os.environ.items()
        if name.startswith(LIBRARY_SETTING_PREFIXES) and OVERSUBSCRIBED_CVARS.get(name) != value
    )
    if not given:
        return ""
    return (
        f"; the environment sets {', '.join(given)}: a value the MPI library does not "
        "accept ends MPI_Init with the library's message above"
    )


def launch_starts(order: Sequence[JobKey], todo: Mapping[JobKey, int], spread_s: float) -> dict:
    """launch -> the seconds after the session's start before which its first pending job
    may not begin: the session's launches evenly over ``spread_s`` (the first at 0)."""
    pending = sorted({job[1] for job in order if todo[job]})
    if spread_s <= 0 or len(pending) < 2:
        return {}
    step = spread_s / (len(pending) - 1)
    return {launch: index * step for index, launch in enumerate(pending)}


def spread_lines(cfg: SweepConfig) -> list[str]:
    """--dry-run's account of --spread: the wait planned between launch starts (none
    without --spread)."""
    if not cfg.spread_minutes or cfg.launches < 2:
        return []
    step = cfg.spread_minutes * 60 / (cfg.launches - 1)
    return [
        f"# spread: {cfg.launches} launches started evenly over {cfg.spread_minutes:g} min "
        f"(--spread): one every {format_duration(step)}, waiting where a launch ends sooner"
    ]


def _wait_for_launch(experiment: Experiment, launch: int, due: float, progress: Progress) -> None:
    """Wait until ``due`` (the engine's clock) before launch ``launch``, saying so; Ctrl-C
    interrupts the wait as it would a job."""
    left = due - experiment.clock()
    if left <= 0:
        return
    progress.clear()
    last = max(job[1] for job in experiment.order)
    print(
        f"# spread: waiting {format_duration(left)} before launch {launch} of {last} "
        f"(--spread {experiment.spread_s / 60:g} min); Ctrl-C stops, --resume continues",
        file=sys.stderr,
        flush=True,
    )
    experiment.pause(left)


def _run_jobs(experiment: Experiment, progress: Progress) -> int:
    """Every job in turn, each launch not before its turn under --spread; the exit code
    of the experiment."""
    code = 0
    start = experiment.clock()
    starts = launch_starts(experiment.order, experiment.todo, experiment.spread_s)
    for job in experiment.order:
        if not experiment.todo[job]:
            continue  # resumed and complete: its launch entry already says what ran
        if job[1] in starts:
            _wait_for_launch(experiment, job[1], start + starts.pop(job[1]), progress)
        outcome = experiment.run(job, progress)
        if outcome.code == 0:
            continue
        if outcome.finished:
            if not outcome.failures:
                progress.clear()
                _say_unclean_end(experiment, job, outcome)
            code = 1  # wrong results or an unclean end, reported, points stored: keep going
            continue
        progress.clear()
        experiment.explain(job, outcome)
        raise JobFailed(outcome.code if outcome.stalled_at is None else 1)
    return code


def _say_unclean_end(experiment: Experiment, job: JobKey, outcome: JobOutcome) -> None:
    """One message for a job that measured all its points and said so, then did not end
    cleanly (a rank killed or failing in MPI_Finalize): its points are stored, and the
    experiment's exit says that something went wrong."""
    print(
        f"osu-dl-bench: error: the job for {_job_text(job)} measured all its points but "
        f"ended with exit code {outcome.code} (a rank killed or failing at its end); its "
        f"points are stored in {experiment.output}",
        file=sys.stderr,
        flush=True,
    )


def run_sweep(cfg: SweepConfig) -> int:
    """The sweep command without --inside; returns the exit code."""
    check_not_in_mpi_job("sweep", "add --inside to sweep in this job")
    if cfg.batch is not None:
        return submit_sweep(cfg, cfg.batch)
    check_local_process_counts(cfg.nprocs, cfg.launching)
    for nprocs in cfg.nprocs:
        # A missing launcher is a usage error, found now.
        job_command(cfg.launching, nprocs, spec_path(cfg.output, nprocs, 1, "mpi"))
    with contextlib.ExitStack() as held:
        # An existing directory is held before it is read: a sweep still writing into it
        # is refused, not raced. A new one is made (and held) only once the plan is good.
        lock = _hold_existing(cfg, held) if not cfg.dry_run else None
        check_run_dir(cfg)
        try:
            plans = run_planner(cfg)
            if cfg.dry_run:
                print("\n".join(plan_lines(list(plans.values())) + spread_lines(cfg)))
                return 0
            if lock is None:
                held.enter_context(_lock(RunStore(cfg.output)))
                check_run_dir(cfg)  # another sweep may have filled it meanwhile
            return _launch_all(cfg, plans)
        except JobFailed as exc:
            return exc.code or 1


def _hold_existing(cfg: SweepConfig, held: contextlib.ExitStack) -> RunLock | None:
    """The run directory's lock, if the directory exists (None if it does not yet)."""
    check_output_dir(cfg)
    store = RunStore(cfg.output)
    return held.enter_context(_lock(store)) if store.path.is_dir() else None


def _lock(store: RunStore) -> RunLock:
    """The sweep's hold on its run directory, naming this command line for another
    command it refuses."""
    return store.lock(command_line(), "-o")


def submit_sweep(cfg: SweepConfig, batch: BatchOptions) -> int:
    """--submit (``batch``): check the options (the planner) and the cluster here, then
    write the batch script into the run directory and submit it; with --dry-run only write
    and print it. Nothing is created before every check has passed."""
    with contextlib.ExitStack() as held:
        existing = _hold_existing(cfg, held)
        check_run_dir(cfg)
        request = slurm.batch_request(cfg.nprocs, batch)
        text = slurm.sweep_script(cfg, request, slurm.read_template())
        if not cfg.dry_run:
            slurm.require_commands()
            slurm.check_fits(request, slurm.query_nodes())
        try:
            plans = run_planner(cfg)
        except JobFailed as exc:
            return exc.code or 1
        store = RunStore(cfg.output)
        if existing is None:
            held.enter_context(_lock(store))
        script = _write_script(store, text)
        if cfg.dry_run:
            print("\n".join(plan_lines(list(plans.values()))))
            print(f"# batch script (not submitted: --dry-run): {script}\n{text}", end="")
            return 0
        job_id = _submit_held(batch, store, script, created=existing is None)
    # Released after the run directory is: the job's sweep takes its lock when it starts.
    slurm.release(job_id)
    print(_submission_lines(cfg.nprocs, request, job_id, script), flush=True)
    return 0


def _write_script(store: RunStore, text: str) -> Path:
    """The batch script, written into the run directory."""
    script = store.path.resolve() / slurm.SCRIPT_NAME
    try:
        write_text_atomic(script, text)
    except OSError as exc:
        raise StoreError(f"cannot write {script} ({exc.strerror or exc})") from None
    return script


def _submit_held(batch: BatchOptions, store: RunStore, script: Path, created: bool) -> str:
    """sbatch the script on hold and record the job; the job id. If sbatch refuses it (an
    option in --sbatch-args), a run directory made for it is removed again."""
    try:
        job_id = slurm.submit_held(script, batch.sbatch_args)
    except UsageError:
        if created:
            for leftover in (script, store.path / LOCK):
                leftover.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                store.path.rmdir()
        raise
    # Held until the submission is recorded: the job writes metadata.json too, and two
    # read-modify-writes at once could lose one of them.
    runinfo.record_submission(store, job_id, str(script))
    return job_id


def _submission_lines(
    nprocs: tuple[int, ...], request: slurm.BatchRequest, job_id: str, script: Path
) -> str:
    """What was submitted and where its results and log will be."""
    run_dir = script.parent
    log = run_dir / slurm.LOG_NAME.replace("%j", job_id)
    return (
        f"submitted Slurm batch job {job_id}: {request.nodes} node(s) x "
        f"{request.ntasks_per_node} tasks, --np {','.join(map(str, nprocs))}\n"
        f"script:  {script}\n"
        f"results: {run_dir / 'results.csv'} and {run_dir / 'metadata.json'}\n"
        f"log:     {log}\n"
        f"follow it with: squeue -j {job_id}"
    )


# Signals that end a sweep as Ctrl-C does: SIGTERM (timeout, scancel, a batch system's
# kill) and SIGHUP (the terminal or ssh session that started it went away).
STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """STOPPING_SIGNALS raise KeyboardInterrupt, so the running job is stopped too instead
    of being orphaned, and the user is told what is kept."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, interrupt) for number in STOPPING_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _mark_incomplete(store: RunStore) -> None:
    """Record that the sweep stopped early. The error that stopped it has been (or is
    about to be) reported; if this fails as well (the same full disk), it is only
    mentioned, so the first error stays the one reported."""
    _second_record(
        lambda: runinfo.record_completion(store, complete=False), "mark the run incomplete"
    )


@dataclass(frozen=True)
class Experiment:
    """What the one experiment engine runs (the sweep, train-bench, the scripts' matrices):
    its run directory (held and created by the caller), its jobs (process count, launch,
    isolation group) in the order they run with the work each has left (0: stored by an
    earlier session), the measurement that runs one job, and what to say of a job that
    stops the experiment (a usage error explained itself)."""

    output: str
    order: list[JobKey]
    todo: Mapping[JobKey, int]
    run: Callable[[JobKey, Progress], JobOutcome]
    explain: Callable[[JobKey, JobOutcome], None]
    # Whether the points' progress bar is drawn (an experiment whose jobs print their own
    # lines and report no points draws none).
    progress: bool = True
    # sweep --spread: the session's launches start evenly over at least this many seconds
    # (the engine's clock and its wait are arguments so a test need not wait).
    spread_s: float = 0.0
    clock: Callable[[], float] = time.monotonic
    pause: Callable[[float], None] = time.sleep
    # Whether the engine marks the run directory complete or incomplete: an experiment that
    # adds to a directory another one finished (model fit's calibration, verify-export's C
    # client launches) leaves that mark, and the Parquet copy, as it found them.
    owns_run: bool = True
    # What the line after Ctrl-C says of what is kept (None: the stored points, for
    # --resume).
    interrupted: str | None = None


@dataclass(frozen=True)
class ExperimentEnd:
    """How an experiment ended: its exit code, the points measured in this session, the
    seconds it took and the lines saying where its results are (none when interrupted)."""

    code: int
    points: int
    seconds: float
    lines: list[str]


def run_experiment(experiment: Experiment) -> ExperimentEnd:
    """Run the experiment's pending jobs in order, then mark its run directory complete.
    Ctrl-C, SIGTERM or SIGHUP stops the running job and ends with 130; a job that stops
    the experiment raises JobFailed; either way the run is marked incomplete and every
    stored point is kept for a resume."""
    store = RunStore(experiment.output)
    todo = dict(experiment.todo)
    quiet = None if experiment.progress else io.StringIO()
    progress = Progress(todo) if quiet is None else Progress(todo, quiet, interactive=False)
    start = time.monotonic()
    progress.show(force=True)
    try:
        with _terminate_as_interrupt():
            code = _run_jobs(experiment, progress)
    except KeyboardInterrupt:
        progress.clear()
        kept = experiment.interrupted or (
            f"the points measured so far are kept in {experiment.output}; rerun with --resume"
        )
        print(f"\ninterrupted: {kept}", file=sys.stderr)
        if experiment.owns_run:
            _mark_incomplete(store)
        return ExperimentEnd(130, progress.done, time.monotonic() - start, [])
    except Exception:
        progress.clear()
        if experiment.owns_run:
            _mark_incomplete(store)
        raise
    finally:
        progress.close()
    lines = runinfo.finish_run(store, complete=True) if experiment.owns_run else []
    return ExperimentEnd(code, progress.done, time.monotonic() - start, lines)


def _launch_all(cfg: SweepConfig, plans: dict[JobKey, dict[str, Any]]) -> int:
    store = RunStore(cfg.output)
    store.create()
    seed = random.SystemRandom().randrange(2**32)
    order = launch_order(cfg.planned_launches(), cfg.nprocs, list(plans), seed)
    runinfo.record_session(store, runinfo.session_fields(cfg, launcher=cfg.launching.label()))
    runinfo.record_launch_order(store, seed, [f"p{p} {k}/{g}" for p, k, g in order])
    heartbeats = Heartbeats(cfg.output)

    def run(job: JobKey, progress: Progress) -> JobOutcome:
        return run_job(cfg, job, progress, plans[job].get("env"), heartbeats)

    def explain(job: JobKey, outcome: JobOutcome) -> None:
        _record_stall(cfg, job, outcome)
        _explain_failure(cfg, job, outcome)

    todo = {job: plan["todo"] for job, plan in plans.items()}
    spread = cfg.spread_minutes * 60
    ended = run_experiment(Experiment(cfg.output, order, todo, run, explain, spread_s=spread))
    if ended.code == 130:
        return 130  # interrupted: said so, run marked incomplete
    lines = [f"# {ended.points} points measured in {format_duration(ended.seconds)}"]
    print("\n".join(lines + ended.lines), flush=True)
    return ended.code
