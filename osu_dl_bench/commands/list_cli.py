"""The list subcommand's option, parsed into a ListConfig."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "registered algorithms, their constraints and backends"


@dataclass(frozen=True)
class ListConfig:
    """Which collective's algorithms to list (None: every collective's)."""

    collective: str | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the list options."""
    parser.add_argument("collective", nargs="?", default=None, help="only this collective")


def config_from_args(args: argparse.Namespace) -> ListConfig:
    """The ListConfig of parsed arguments."""
    return ListConfig(args.collective)


def start(cfg: ListConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.runtime.launcher import launcher_rank
    from osu_dl_bench.runtime.start import init_mpi

    init_mpi()
    from osu_dl_bench.commands.listing import algorithm_listing

    if launcher_rank() == 0:
        print(algorithm_listing(cfg.collective))
    return 0
