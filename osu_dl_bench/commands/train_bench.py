"""``osu-dl-bench train-bench``: training throughput of our trainer with native MPI
allreduce, with each fixed algorithm of the registry, with the tuned selector (also with
the gradient buckets in registered memory, where cma reads the peers' buckets directly),
and of PyTorch DDP over Gloo (with ``--device cuda``, on one GPU per rank, also DDP over
NCCL, in the ``nccl`` isolation group).

    osu-dl-bench train-bench [--np 2] [--launches 3] [--rounds 5] [--steps 8]
                             [--table T.json] [--seed S] [--out results/train_p2]
                             [--timeout 3600] [--device cpu|cuda]

Isolation (train/comparison.py): the configurations that bind Gloo form the ``gloo``
isolation group and every other one the ``mpi`` group; each group is measured in MPI
launches of its own (this command again, with --worker: train/bench_launch.py), and the
mpi group's launches never bind Gloo (each launch records its thread counts to show it).
Native runs in every group, so each group has a common reference.

Launches: launch 1 of every group, then launch 2, ... (``--launches K``), the groups'
order shuffled within each launch with a recorded seed, so neither group always runs first
while the machine drifts; the experiment engine (jobs/experiment.py) runs them and keeps
each launch in the run directory OUT as it ends, so ``--resume`` continues a stopped run.
Inside a launch every configuration runs, in each of ``--rounds`` rounds, ``--warmup``
untimed and ``--steps`` timed steps, in an order rotated from round to round.

Reported per configuration (train/bench_report.py): the median img/s over every round of
every launch, and its ratio against DDP-Gloo and against native with a 95% interval.
Writes OUT.json (every measurement with its launch and group, each launch's record, the
summary) and OUT.txt (the table).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from osu_dl_bench.paths import check_writable_file
from osu_dl_bench.train.bench_config import (
    TrainBenchConfig,
    recorded_options,
    resume_command,
    worker_argv,
    workload,
)

if TYPE_CHECKING:
    from osu_dl_bench.jobs.orchestrate import JobKey, JobOutcome


def run_train_bench(cfg: TrainBenchConfig) -> int:
    """Run every group's launches in turn through the experiment engine, keeping each in
    the run directory OUT, and report; or (with --worker, inside one launch) measure that
    launch's configurations."""
    if cfg.worker:
        return _run_worker(cfg)
    check_writable_file("--out", f"{cfg.out}.txt", make_parents=True)
    from osu_dl_bench.jobs.experiment import RecordedExperiment, Turn, run_recorded
    from osu_dl_bench.jobs.orchestrate import Heartbeats, JobFailed
    from osu_dl_bench.selection.table import load_table
    from osu_dl_bench.train.bench_report import merge_parts, training_points
    from osu_dl_bench.train.comparison import groups_for
    from osu_dl_bench.train.config import check_train_config, require_libraries

    # One message and exit 2 before any job starts, and before the run directory exists.
    check_train_config(workload(cfg))
    require_libraries(workload(cfg))
    for table in (cfg.table, cfg.adapted_table):
        if table:
            load_table(table)  # missing or malformed: its TableError, not a failed launch
    if cfg.device == "cuda":
        from osu_dl_bench.train.device import require_torch_gpu

        require_torch_gpu()
    groups = groups_for(workload(cfg).buffers)
    spec = RecordedExperiment(
        "train-bench", recorded_options(cfg), cfg.out, "--out", (cfg.np,), cfg.launches, groups,
        resume=cfg.resume, seed=cfg.seed,
    )  # fmt: skip
    started: list[tuple[str, JobOutcome]] = []
    heartbeats = Heartbeats(cfg.out)

    def launch(turn: Turn) -> JobOutcome:
        _, number, group = turn.job
        print(
            f"# launch {number}/{cfg.launches}, group {group} ({turn.index} of {turn.total})",
            flush=True,
        )
        command = job_command(cfg, number, group, str(turn.part))
        outcome = follow_launch(cfg, command, turn.job, heartbeats)
        started.append((f"launch {number} of group {group}", outcome))
        return outcome

    try:
        found = run_recorded(spec, launch, training_points)
    except JobFailed as exc:
        what, outcome = started[-1]
        print(_stopped_message(cfg, what, outcome), file=sys.stderr, flush=True)
        return exc.code or 1
    if found.code != 0:
        return found.code
    order = [(number, group) for _, number, group in found.order]
    _report(cfg, merge_parts(found.records, found.seed, order))
    return 0


def _stopped_message(cfg: TrainBenchConfig, what: str, outcome: JobOutcome) -> str:
    """What stopped the run (a stall, the time limit, an exit code), where its launches
    are kept and the command that continues it (the run directory is kept: a new run into
    it is refused without --resume)."""
    if outcome.over_limit:
        why = f"did not finish within {cfg.timeout:g} s (--timeout) and was stopped"
    elif outcome.stalled_at is not None:
        why = (
            f"reported nothing for {cfg.stall_timeout:g} s (--stall-timeout) while "
            f"measuring {outcome.stalled_at} and was stopped"
        )
        why += f": {outcome.stall.summary()}" if outcome.stall is not None else ""
    else:
        why = f"ended with exit code {outcome.code}"
    return (
        f"osu-dl-bench: error: {what} {why}; the launches measured so far are kept in "
        f"{cfg.out}: continue with {resume_command(cfg)}"
    )


def launch_order(launches: int, groups: Iterable[str], seed: int) -> list[tuple[int, str]]:
    """(launch, group) in the order they run: the engine's order (jobs.orchestrate) of
    one process count's launches."""
    from osu_dl_bench.jobs.orchestrate import launch_order as engine_order

    keys = [(0, number, group) for number in range(1, launches + 1) for group in groups]
    return [(number, group) for _, number, group in engine_order(launches, (0,), keys, seed)]


def job_command(
    cfg: TrainBenchConfig, launch: int = 1, group: str | None = None, part: str | None = None
) -> list[str]:
    """'mpiexec -n NP python -m osu_dl_bench train-bench --worker OPTIONS' for one launch
    of one group, rank 0 writing its measurements to ``part``."""
    from osu_dl_bench.jobs.launch import mpi_command

    return mpi_command(cfg.np, ["-m", "osu_dl_bench", *worker_argv(cfg, launch, group, part)])


def follow_launch(cfg: TrainBenchConfig, cmd: list[str], job: JobKey, heartbeats) -> JobOutcome:
    """Run one launch to its end through the job launcher, as sweep runs its jobs: stopped,
    with its ranks' heartbeats reported, when it writes nothing for the stall timeout
    (exit 1), past ``--timeout`` (exit 1) or on Ctrl-C (exit 130), so a hung job never
    hangs the command. Its ranks wait at a Gloo rendezvous for part of the stall timeout
    only (jobs.launch.rendezvous_environment)."""
    from osu_dl_bench.jobs import launch
    from osu_dl_bench.jobs.orchestrate import JobOutcome, run_followed
    from osu_dl_bench.jobs.progress import Progress

    env = launch.mpi_environment(extra=launch.rendezvous_environment(cfg.stall_timeout))
    quiet = Progress({}, interactive=False)  # a launch's lines say how it goes
    try:
        outcome = run_followed(cmd, env, job, quiet, cfg.stall_timeout, heartbeats, cfg.timeout)
    except KeyboardInterrupt:
        print("\ninterrupted: the launch was stopped", file=sys.stderr, flush=True)
        return JobOutcome(130, finished=False, failures=0)
    if outcome.over_limit:
        return JobOutcome(1, finished=False, failures=0, over_limit=True)
    return outcome


def _run_worker(cfg: TrainBenchConfig) -> int:
    """Inside mpiexec: measure this launch; rank 0 leaves its record where the command
    asked (--part), else (a worker run by hand) reports this one launch."""
    from osu_dl_bench.measurement import heartbeat
    from osu_dl_bench.train.bench_launch import measure_launch, write_launch_record

    heartbeat.start_for_this_rank()  # where the command following the launch asked
    record = measure_launch(cfg)
    if record is None:
        return 0  # not rank 0
    if cfg.part:
        write_launch_record(cfg.part, record)
        return 0
    from osu_dl_bench.train.bench_report import merge_parts

    _report(cfg, merge_parts([record], None, [(record["launch"], record["group"])]))
    return 0


def _report(cfg: TrainBenchConfig, measured) -> None:
    """Print the table, write OUT.txt and OUT.json."""
    from osu_dl_bench.train.bench_report import report_payload, report_table, write_report

    text, summary = report_table(cfg, measured)
    print(text, flush=True)
    txt, data = write_report(cfg.out, text, report_payload(cfg, measured, summary))
    print(f"# wrote {txt} and {data}", flush=True)
