"""The ``osu-dl-bench`` command: subcommands registered in one table, parsed once.

MPI is initialised only after the options are parsed, at the requested thread level;
option errors are printed by rank 0 alone and every rank exits with code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from osu_dl_bench import __version__
from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.launcher import launcher_rank
from osu_dl_bench.runtime.start import set_command


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing from every rank and exiting."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}")

    def _print_message(self, message: str, file=None) -> None:
        if message and launcher_rank() == 0:
            super()._print_message(message, file)


def _cmd_bench(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.bench_options import config_from_args
    from osu_dl_bench.measurement.records import check_output_path
    from osu_dl_bench.runtime.start import init_mpi

    cfg = config_from_args(args)
    if launcher_rank() == 0:  # only rank 0 writes -o
        check_output_path(cfg.output)
    mpi = init_mpi(cfg.thread_level)
    from osu_dl_bench.commands.bench import run_bench

    return run_bench(mpi.COMM_WORLD, cfg)


def _cmd_list(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.listing_options import config_from_args
    from osu_dl_bench.runtime.start import init_mpi

    cfg = config_from_args(args)
    init_mpi()
    from osu_dl_bench.commands.listing import algorithm_listing

    if launcher_rank() == 0:
        print(algorithm_listing(cfg.collective))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.sweep_options import config_from_args

    cfg = config_from_args(args)
    if cfg.adaptive:
        from osu_dl_bench.commands.sweep import run_adaptive_sweep

        return run_adaptive_sweep(cfg)
    if not (cfg.inside or cfg.plan_only):
        # The orchestrator launches one MPI job per process count and never loads MPI.
        from osu_dl_bench.jobs.orchestrate import run_sweep

        return run_sweep(cfg)
    from osu_dl_bench.runtime.start import init_mpi

    if cfg.inside:
        _start_heartbeat()
    mpi = init_mpi(cfg.thread_level)
    from osu_dl_bench.jobs.worker import run_inside, run_plan_only

    return run_plan_only(cfg) if cfg.plan_only else run_inside(mpi.COMM_WORLD, cfg)


def _start_heartbeat() -> None:
    """This rank's heartbeat, before MPI starts, where the orchestrator asked for one (a
    rank stuck in MPI's start-up shows as such in a stall report)."""
    from osu_dl_bench.measurement import heartbeat

    warning = heartbeat.start_from_environment(launcher_rank())
    if warning:
        print(f"osu-dl-bench: warning: {warning}", file=sys.stderr, flush=True)


def _add_sweep(sub) -> None:
    from osu_dl_bench.commands.sweep_options import add_sweep_arguments

    parser = sub.add_parser(
        "sweep", help="collectives x algorithms x sizes x process counts into a run directory"
    )
    add_sweep_arguments(parser)


def _add_bench(sub) -> None:
    from osu_dl_bench.commands.bench_options import add_bench_arguments

    parser = sub.add_parser("bench", help="OSU-style benchmark of a collective or p2p test")
    add_bench_arguments(parser)


def _add_list(sub) -> None:
    from osu_dl_bench.commands.listing_options import add_list_arguments

    parser = sub.add_parser("list", help="registered algorithms, their constraints and backends")
    add_list_arguments(parser)


def _cmd_tune(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.tune_options import tune_config_from_args
    from osu_dl_bench.runtime.start import init_mpi

    cfg = tune_config_from_args(args)
    init_mpi()  # the registry, which the table is checked against, loads mpi4py
    from osu_dl_bench.commands.tune import run_tune

    return run_tune(cfg)


def _add_tune(sub) -> None:
    from osu_dl_bench.commands.tune_options import add_tune_arguments

    parser = sub.add_parser("tune", help="tuning table (+ summary, exports) from a run directory")
    add_tune_arguments(parser)


def _cmd_select(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.tune_options import select_config_from_args
    from osu_dl_bench.runtime.start import init_mpi

    cfg = select_config_from_args(args)
    init_mpi()
    from osu_dl_bench.commands.tune import run_select

    return run_select(cfg)


def _add_select(sub) -> None:
    from osu_dl_bench.commands.tune_options import add_select_arguments

    parser = sub.add_parser("select", help="what the runtime selector would pick, and why")
    add_select_arguments(parser)


def _cmd_plot(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.plot_options import config_from_args
    from osu_dl_bench.runtime.start import init_mpi

    cfg = config_from_args(args)
    init_mpi()
    from osu_dl_bench.commands.plot import run_plot

    return run_plot(cfg)


def _add_plot(sub) -> None:
    from osu_dl_bench.commands.plot_options import add_plot_arguments

    parser = sub.add_parser("plot", help="PNG plots of a run directory (and its tuning table)")
    add_plot_arguments(parser)


def _cmd_train(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.train_options import config_from_args
    from osu_dl_bench.runtime.agreement import agree_on_errors, agree_on_settings
    from osu_dl_bench.train.options import (
        init_training_mpi,
        require_libraries,
        settings_every_rank_shares,
    )

    cfg = config_from_args(args)
    require_libraries(cfg)  # before MPI: a missing extra is one message and exit 2
    mpi, note = init_training_mpi()
    world = mpi.COMM_WORLD
    agree_on_settings(world, agree_on_errors(world, lambda: settings_every_rank_shares(cfg)))
    cfg.local_batch(world.Get_size())  # same verdict on every rank, before torch loads
    from osu_dl_bench.train.run import run_train

    return run_train(world, cfg, [note] if note else [])


def _add_train(sub) -> None:
    from osu_dl_bench.commands.train_options import add_train_arguments

    parser = sub.add_parser("train", help="data-parallel CNN training through the collectives")
    add_train_arguments(parser)


def _cmd_train_bench(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.train_bench import run_train_bench
    from osu_dl_bench.commands.train_bench_options import config_from_args

    return run_train_bench(config_from_args(args))  # MPI only inside its jobs (--worker)


def _add_train_bench(sub) -> None:
    from osu_dl_bench.commands.train_bench_options import add_train_bench_arguments

    parser = sub.add_parser(
        "train-bench",
        help="training throughput: our trainer (fixed, native, tuned) vs PyTorch DDP over Gloo",
    )
    add_train_bench_arguments(parser)


def _cmd_compare(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.compare_options import config_from_args

    cfg = config_from_args(args)
    if cfg.table:
        from osu_dl_bench.runtime.start import init_mpi

        init_mpi()  # the registry, which the table is checked against, loads mpi4py
    from osu_dl_bench.commands.compare import run_compare

    return run_compare(cfg)


def _add_compare(sub) -> None:
    from osu_dl_bench.commands.compare_options import add_compare_arguments

    parser = sub.add_parser(
        "compare", help="two sweeps' agreement, and a tuning table's choices on another run"
    )
    add_compare_arguments(parser)


def _cmd_merge(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.merge import run_merge
    from osu_dl_bench.commands.merge_options import config_from_args

    return run_merge(config_from_args(args))  # no MPI: it copies rows and metadata


def _add_merge(sub) -> None:
    from osu_dl_bench.commands.merge_options import add_merge_arguments

    parser = sub.add_parser("merge", help="several sweeps' run directories as one")
    add_merge_arguments(parser)


def _cmd_model(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.model_options import config_from_args
    from osu_dl_bench.runtime.start import init_mpi

    cfg = config_from_args(args)
    init_mpi()  # the registry, whose cost formulas the model evaluates, loads mpi4py
    from osu_dl_bench.commands.model import run_model

    return run_model(cfg)


def _add_model(sub) -> None:
    from osu_dl_bench.commands.model_options import add_model_arguments

    parser = sub.add_parser(
        "model", help="performance model: fit, accuracy vs a sweep, predict at scale, train"
    )
    add_model_arguments(parser)


def _cmd_triage(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.triage import run_triage
    from osu_dl_bench.commands.triage_options import config_from_args

    return run_triage(config_from_args(args))  # no MPI: it reads stored timings


def _add_triage(sub) -> None:
    from osu_dl_bench.commands.triage_options import add_triage_arguments

    parser = sub.add_parser(
        "triage", help="which ranks and nodes are late or slow, from per-rank timing"
    )
    add_triage_arguments(parser)


def _cmd_clean(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.clean import run_clean
    from osu_dl_bench.commands.clean_options import config_from_args

    return run_clean(config_from_args(args))  # no MPI: it tidies up after jobs that are gone


def _add_clean(sub) -> None:
    from osu_dl_bench.commands.clean_options import add_clean_arguments

    parser = sub.add_parser(
        "clean", help="remove MPICH shared-memory segments that killed or aborted jobs left"
    )
    add_clean_arguments(parser)


def _cmd_verify_export(args: argparse.Namespace) -> int:
    from osu_dl_bench.commands.verify_export import run_verify_export
    from osu_dl_bench.commands.verify_export_options import config_from_args

    # No MPI here: it launches the jobs, as sweep does.
    return run_verify_export(config_from_args(args))


def _add_verify_export(sub) -> None:
    from osu_dl_bench.commands.verify_export_options import add_verify_export_arguments

    parser = sub.add_parser(
        "verify-export",
        help="the MPI library with an exported selection file against without it: speedup "
        "per size and proof that the file took effect",
    )
    add_verify_export_arguments(parser)


COMMANDS: dict[str, tuple[Callable, Callable[[argparse.Namespace], int]]] = {
    "bench": (_add_bench, _cmd_bench),
    "list": (_add_list, _cmd_list),
    "sweep": (_add_sweep, _cmd_sweep),
    "tune": (_add_tune, _cmd_tune),
    "select": (_add_select, _cmd_select),
    "plot": (_add_plot, _cmd_plot),
    "compare": (_add_compare, _cmd_compare),
    "merge": (_add_merge, _cmd_merge),
    "train": (_add_train, _cmd_train),
    "train-bench": (_add_train_bench, _cmd_train_bench),
    "model": (_add_model, _cmd_model),
    "triage": (_add_triage, _cmd_triage),
    "clean": (_add_clean, _cmd_clean),
    "verify-export": (_add_verify_export, _cmd_verify_export),
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = _Parser(prog="osu-dl-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"osu-dl-bench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


# Options whose value is itself a launcher's command line: '--launcher-args --mpi=pmix'
# would otherwise read '--mpi=pmix' as sweep's own --mpi.
_VERBATIM_VALUES = ("--launcher-args",)


def verbatim_values(argv: list[str]) -> list[str]:
    """``argv`` with each _VERBATIM_VALUES option joined to the word after it ('OPT=VALUE'),
    so a value starting with '-' stays that option's value."""
    joined, words = [], iter(argv)
    for word in words:
        value = next(words, None) if word in _VERBATIM_VALUES else None
        joined.append(word if value is None else f"{word}={value}")
    return joined


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""

    def body() -> int:
        given = sys.argv[1:] if argv is None else argv
        args = build_parser().parse_args(verbatim_values(given))
        set_command(args.command)
        return COMMANDS[args.command][1](args)

    code = run_guarded(body)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
