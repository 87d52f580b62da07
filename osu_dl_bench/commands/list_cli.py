"""The list subcommand's option, parsed into a ListConfig."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from osu_dl_bench.commands.arguments import whole_number
from osu_dl_bench.errors import UsageError

# MPI counts ranks in a C int (MPI_Comm_size): no job has more.
MAX_RANKS = 2**31 - 1

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
    ranks = whole_number(1, MAX_RANKS)
    parser.add_argument("--np", type=ranks, default=2, metavar="P", help="ranks (default 2)")
    parser.add_argument(
        "--nodes",
        type=ranks,
        default=1,
        metavar="N",
        help="nodes, each with the same number of ranks (default 1)",
    )


def config_from_args(args: argparse.Namespace) -> ListConfig:
    """The ListConfig of parsed arguments."""
    # The layers' model (collectives.mpich_layers.Call.ranks_per_node) puts np / nodes
    # ranks on every node: an uneven job would be listed as another one.
    if args.np % args.nodes:
        raise UsageError(
            f"--np {args.np} --nodes {args.nodes}: expected np a multiple of nodes "
            "(the same ranks on every node)"
        )
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
