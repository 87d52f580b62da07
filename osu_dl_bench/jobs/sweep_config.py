"""The sweep subcommand's config (SweepConfig) and the checks of its values, made without
MPI; commands.sweep_cli parses the command line into it.

Everything here runs in the orchestrator, which must never load MPI (importing anything
under ``collectives`` does), so only checks that need no MPI library live
here; the others (algorithm names, datatype, op, device) run in the planner and in every
job (see ``plan``).
"""

from __future__ import annotations

import os
import re
import shlex
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from collectives.units import split_variant_texts
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.job_spec import MAX_LAUNCHES, Measurement  # noqa: F401 (re-exported)
from osu_dl_bench.measurement.bench_config import COLLECTIVES
from osu_dl_bench.measurement.heartbeat import TICK_SECONDS
from osu_dl_bench.runtime.slurm_env import slurm_job

LAUNCHERS = ("mpiexec", "srun")
# srun's process-management interface per MPI library: the mpich wheel speaks PMI-2;
# Open MPI 5 speaks only PMIx ("Launching with Slurm" in Open MPI 5's documentation:
# srun --mpi=pmix), which Slurm's mpi/pmix plugin serves where libpmix is installed.
SRUN_MPI_PLUGIN = {"mpich": "pmi2", "openmpi": "pmix"}
DEFAULT_COLLECTIVES = ("allreduce", "bcast")
DEFAULT_SIZES = "8:16M"
# Seconds of timed rounds per (p, collective, size) point, whatever the number of
# candidates, shared by the launches (a backend's own launches get a fifth more): 88
# points (allreduce and bcast, 8 B-16 MiB, p = 2 and 4) in 3 launches take about 5 minutes
# on 2 cores (at 2.0 s they took 6:25), since the budget does not grow when the machine
# slows; the launches' own costs (start, checks, iteration counts, the model's
# calibration) are the rest.
DEFAULT_BUDGET = 1.5
# Launches per point: a launch's rounds share its placement, page layout and machine state,
# so rounds inside one launch hide the variance between launches (on this machine the same
# call differs up to 3x from one launch to the next). Three is the fewest that gives a
# launch-level interval; the budget is shared among them, so a sweep takes as long.
DEFAULT_LAUNCHES = 3
MAX_BUDGET = 3600.0
# A job that reports nothing for this long is stopped: the slowest point seen (16 MiB,
# 16 candidates, p = 4 on 2 busy cores) takes well under a minute.
DEFAULT_STALL_TIMEOUT = 900.0
MAX_STALL_TIMEOUT = 86400.0
# A healthy job's ranks tick every heartbeat.TICK_SECONDS: a shorter wait than three ticks
# stops jobs that are only between two reports, then blames their algorithm.
MIN_STALL_TIMEOUT = 3 * TICK_SECONDS
MAX_PROCESSES = 4096
# More ranks than this per core on one host measure the scheduler, not the collective.
MAX_RANKS_PER_CORE = 16
# The batch job's time limit when --submit is given no --time: the 88-point reference
# sweep takes about 3 minutes on 2 cores, so an hour leaves room for bigger ones.
DEFAULT_TIME_LIMIT = "01:00:00"
# Characters that end or rewrite a line of a shell script: C0 controls (newline, CR, NUL,
# tab, escape), DEL, C1 controls and Unicode's line separators.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# How each option is spelled in messages, where it is not --DEST.
_FLAGS = {
    "output": "-o",
    "message_size": "-m",
    "algorithms": "-a",
    "dtype": "-T",
    "device": "-d",
}


@dataclass(frozen=True)
class Launching:
    """How the orchestrator starts each job and how long it waits for it to say something
    (jobs.launch, jobs.orchestrate)."""

    launcher: str = "mpiexec"
    launcher_args: tuple[str, ...] = ()
    # --mpi: which embedded MPI library the jobs run (None: the one mpi4py finds).
    mpi: str | None = None
    stall_timeout: float = DEFAULT_STALL_TIMEOUT

    def label(self) -> str:
        """The launcher as the metadata records it: 'srun --mpi=pmix -N 2'."""
        return " ".join([self.launcher, *self.launcher_args])


@dataclass(frozen=True)
class BatchOptions:
    """--submit: the shape of the sweep's Slurm batch job and how it is submitted
    (jobs.slurm)."""

    nodes: int | None = None
    ntasks_per_node: int | None = None
    time_limit: str = DEFAULT_TIME_LIMIT
    partition: str | None = None
    sbatch_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepConfig:
    """Every option of one sweep, by the floor that uses it: what its jobs measure
    (``measure``, the part a launched job's spec carries), how they are started
    (``launching``), the batch job of --submit (``batch``), and what the orchestrator
    schedules and records itself (the rest)."""

    nprocs: tuple[int, ...]  # empty: the job's size (--inside only)
    measure: Measurement
    launching: Launching
    output: str
    resume: bool
    budget: float  # --budget: timed seconds per point, shared by its launches
    launches: int  # --launches: launches per point (with --adaptive: the screening ones)
    inside: bool
    dry_run: bool
    # --submit: write the sweep's sbatch script into the run directory and submit it.
    batch: BatchOptions | None = None
    # --adaptive MAX: after --launches screening launches over every candidate (1 by
    # default), focused launches only where a decision is open, up to MAX at any point.
    adaptive: int = 0
    # --spread MINUTES: the launches stretched over at least this many minutes (waiting
    # between them), so they sample the machine's drift over that span; 0: back to back.
    spread_minutes: float = 0.0
    # An adaptive sweep's step: the launch it measures last (launches 1..last_launch are
    # planned, the earlier ones found stored); None: --launches.
    last_launch: int | None = None
    # --risk, --indifference: the decision rule that says which points are still open
    # (a selection.rule.DecisionRule, set by the sweep command with --adaptive; None: the
    # rule's default). Held as the object: this floor may not import selection.
    rule: object | None = None

    def planned_launches(self) -> int:
        """How many launches this session plans (the launch numbers 1..that)."""
        return self.last_launch or self.launches

    def batch_argv(self) -> list[str]:
        """The options a submitted batch job passes on to ``sweep --launcher srun``, apart
        from --np and -o, which its script sets (a person reads and may edit the script,
        so it carries options, not a spec)."""
        m = self.measure
        argv = [
            "--collectives",
            ",".join(m.collectives),
            "-m",
            f"{m.min_size}:{m.max_size}",
            "-a",
            m.algorithms,
            "-T",
            m.dtype,
            "--op",
            m.op,
            "-d",
            m.device,
            "--budget",
            repr(self.budget),
            "--launches",
            str(self.launches),
            *([] if m.calibrate else ["--no-calibration"]),
            *([] if m.null_control else ["--no-null"]),
            "--thread-level",
            m.thread_level,
            *(["--library-file", m.library_file] if m.library_file else []),
            *(["--mpi", self.launching.mpi] if self.launching.mpi else []),
            "--stall-timeout",
            f"{self.launching.stall_timeout:g}",
        ]
        if m.emulated_ppn:
            argv += ["--ranks-per-node", str(m.emulated_ppn)]
        if self.launching.launcher_args:
            argv.append(f"--launcher-args={shlex.join(self.launching.launcher_args)}")
        if self.resume:
            argv.append("--resume")
        if self.spread_minutes:
            argv += ["--spread", f"{self.spread_minutes:g}"]
        return argv


def parse_process_counts(text: str, option: str = "--np") -> tuple[int, ...]:
    """``option`` (--np) '2,4' or '2-4,8' -> sorted distinct counts, each in 1..MAX_PROCESSES."""
    counts: set[int] = set()
    for item in filter(None, (t.strip() for t in text.split(","))):
        lo_text, dash, hi_text = item.partition("-")
        if not lo_text.isdigit() or (dash and not hi_text.isdigit()):
            raise UsageError(f"{option} {text}: expected counts like 2,4 or 2-4, got {item!r}")
        lo = int(lo_text)
        hi = int(hi_text) if dash else lo
        if lo < 1 or hi < lo:
            raise UsageError(f"{option} {text}: process counts must be >= 1 and ranges ascending")
        if hi > MAX_PROCESSES:
            raise UsageError(
                f"{option} {text}: {hi} processes is above the limit of {MAX_PROCESSES}"
            )
        counts.update(range(lo, hi + 1))
    if not counts:
        raise UsageError(f"{option} {text!r}: no process count given")
    return tuple(sorted(counts))


def parse_collectives(text: str) -> tuple[str, ...]:
    """--collectives 'allreduce,bcast' or 'all' -> distinct names in the order given."""
    names = list(COLLECTIVES) if text.strip() == "all" else [t.strip() for t in text.split(",")]
    names = list(dict.fromkeys(n for n in names if n))
    unknown = [n for n in names if n not in COLLECTIVES]
    if unknown:
        raise UsageError(
            f"--collectives: unknown collective {unknown[0]!r}: expected some of "
            f"{', '.join(COLLECTIVES)} or all"
        )
    if not names:
        raise UsageError("--collectives: no collective named")
    return tuple(names)


def _script_breaking(value: str) -> str | None:
    """The first character that breaks a script line or hides what it says: controls, and
    format characters (bidi overrides such as U+202E make the script read otherwise)."""
    found = CONTROL_CHARACTERS.search(value)
    if found:
        return found[0]
    return next((c for c in value if unicodedata.category(c) == "Cf"), None)


def escaped(value: str) -> str:
    """repr with format characters escaped too (repr prints them raw)."""
    return "".join(
        f"\\u{ord(c):04x}" if unicodedata.category(c) == "Cf" else c for c in repr(value)
    )


def check_script_values(values: Mapping[str, object]) -> None:
    """Refuse control characters in every option value (by destination name), since a
    batch script carries them all (the command line in its provenance comment, most also
    in its commands): a newline would end the script's line and start a command of the
    value's choosing."""
    for dest, value in values.items():
        found = _script_breaking(value) if isinstance(value, str) else None
        if found:
            flag = _FLAGS.get(dest, "--" + dest.replace("_", "-"))
            raise UsageError(
                f"{flag} {escaped(value)}: control character {escaped(found)} refused, since the "
                "value would go into a batch script"
            )


# --mpi: the embedded libraries a sweep can be told to run.
MPI_LIBRARIES = ("mpich", "openmpi")


def resolve_library_file(text: str | None) -> str | None:
    """The selection file's absolute path (the jobs may run elsewhere), or None."""
    if text is None:
        return None
    path = Path(text)
    if not path.is_file():
        raise UsageError(f"{text}: no such file (expected an exported selection file)")
    return str(path.resolve())


def check_sweep_config(cfg: SweepConfig) -> None:
    """The checks that need the whole SweepConfig: --adaptive's launches and -a's names."""
    if cfg.adaptive and (cfg.inside or cfg.batch):
        raise UsageError("--adaptive launches its own jobs: drop --inside and --submit")
    if cfg.adaptive and cfg.adaptive <= cfg.launches:
        raise UsageError(
            f"--adaptive {cfg.adaptive}: expected more launches in all than --launches "
            f"({cfg.launches})"
        )
    if cfg.spread_minutes and cfg.inside:
        raise UsageError("--spread paces the launches the sweep starts: drop --inside")
    if cfg.spread_minutes and cfg.launches < 2:
        raise UsageError(
            f"--spread {cfg.spread_minutes:g}: needs --launches 2 or more (it spreads launches "
            "over time; one launch has nothing to spread)"
        )
    if not split_variant_texts(cfg.measure.algorithms):
        raise UsageError("-a: no algorithm named")
    names = {text.partition(":")[0].strip() for text in split_variant_texts(cfg.measure.algorithms)}
    if cfg.adaptive and not names & {"all", "native"}:
        # Every ratio adaptive judges is against native measured in the same launch
        # (selection.adaptive): without it no point can be judged open.
        raise UsageError(
            "--adaptive decides each point against native, measured in the same launch: "
            "add native to -a"
        )


def check_local_process_counts(nprocs: tuple[int, ...], launching: Launching) -> None:
    """Refuse --np beyond what this host (mpiexec) or allocation (srun) can run."""
    largest = max(nprocs)
    if launching.launcher == "srun":
        job = slurm_job()
        # Asking a Slurm allocation for more tasks than it has leaves the step pending
        # forever, not failed.
        if job is not None and job.ntasks and largest > job.ntasks:
            raise UsageError(
                f"--np {largest}: this allocation (Slurm job {job.job_id}) has only "
                f"{job.ntasks} tasks"
            )
        return
    if launching.launcher_args:
        return  # hosts given to mpiexec: the cluster decides
    cores = os.cpu_count() or 1
    limit = MAX_RANKS_PER_CORE * cores
    if largest > limit:
        raise UsageError(
            f"--np {largest}: more than {limit} processes ({MAX_RANKS_PER_CORE} per core) on "
            f"this host's {cores} cores; give mpiexec hosts with --launcher-args or use srun"
        )


def check_output_dir(cfg: SweepConfig) -> None:
    """-o names a directory, or nothing yet."""
    path = Path(cfg.output)
    if path.exists() and not path.is_dir():
        raise UsageError(f"-o {cfg.output}: exists and is not a directory")


def check_run_dir(cfg: SweepConfig) -> None:
    """A run directory must be new or empty unless --resume continues it (rows that
    cannot be used are counted in a warning here, once per sweep)."""
    from osu_dl_bench.measurement.store import RunStore  # pandas: not at option parsing

    check_output_dir(cfg)
    store = RunStore(cfg.output)
    if not store.results_path.exists():
        return
    frame = store.load()  # a UsageError if it is not a sweep's results file
    if cfg.resume:
        store.check_appendable()
    if len(frame) and not cfg.resume:
        raise UsageError(
            f"-o {cfg.output} already holds {len(frame)} results: add --resume to continue "
            "that sweep, or choose a new directory"
        )
