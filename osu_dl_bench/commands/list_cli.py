"""The list subcommand's option, parsed into a ListConfig."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from osu_dl_bench.errors import UsageError

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "registered algorithms, their constraints and backends"


@dataclass(frozen=True)
class ListConfig:
    """Which collective's algorithms to list (None: every collective's); with ``library``,
    that MPI library's layered candidates in a job of ``nprocs`` ranks on ``nodes`` nodes."""

    collective: str | None
    library: str | None = None
    nprocs: int = 2
    nodes: int = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the list options."""
    parser.add_argument("collective", nargs="?", default=None, help="only this collective")
    parser.add_argument(
        "--library",
        choices=("mpich",),
        default=None,
        help="the library's own candidates, layer by layer, in the job of --np/--nodes",
    )
    parser.add_argument("--np", type=int, default=2, metavar="P", help="ranks (default 2)")
    parser.add_argument("--nodes", type=int, default=1, metavar="N", help="nodes (default 1)")


def config_from_args(args: argparse.Namespace) -> ListConfig:
    """The ListConfig of parsed arguments."""
    if args.np < 1 or args.nodes < 1 or args.np < args.nodes:
        raise UsageError(f"--np {args.np} --nodes {args.nodes}: expected 1 <= nodes <= np")
    return ListConfig(args.collective, args.library, args.np, args.nodes)


def start(cfg: ListConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.runtime.launcher import launcher_rank
    from osu_dl_bench.runtime.start import init_mpi

    if cfg.library is not None:  # data: MPICH's trees, no MPI started
        from osu_dl_bench.commands.listing import mpich_listing

        print(mpich_listing(cfg.collective, cfg.nprocs, cfg.nodes))
        return 0
    init_mpi()
    from osu_dl_bench.commands.listing import algorithm_listing

    if launcher_rank() == 0:
        print(algorithm_listing(cfg.collective))
    return 0
