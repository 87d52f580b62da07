"""The clean subcommand's options, parsed into a CleanConfig."""

from __future__ import annotations

import argparse

from osu_dl_bench.commands.clean import MIN_AGE_S, SHM_DIR, CleanConfig

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "remove MPICH shared-memory segments that killed or aborted jobs left"


def _age(text: str) -> float:
    """An age in seconds (argparse type): a number from 0 to 1e9."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 10**9:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the clean options."""
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be removed, remove nothing"
    )
    parser.add_argument(
        "--min-age",
        type=_age,
        default=MIN_AGE_S,
        metavar="SECONDS",
        help=f"leave younger segments alone (default {MIN_AGE_S:g} s)",
    )
    parser.add_argument(
        "--dir", default=str(SHM_DIR), help=f"where MPICH keeps its segments (default {SHM_DIR})"
    )


def config_from_args(args: argparse.Namespace) -> CleanConfig:
    """The CleanConfig of parsed arguments."""
    return CleanConfig(args.dry_run, args.min_age, args.dir)


def start(cfg: CleanConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.commands.clean import run_clean

    return run_clean(cfg)  # no MPI: it tidies up after jobs that are gone
