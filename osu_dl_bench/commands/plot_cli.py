"""The plot subcommand's options, parsed into a PlotConfig."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the work module loads numpy and pandas, which parsing must not wait for
    from osu_dl_bench.commands.plot import PlotConfig

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "PNG plots of a run directory (and its tuning table)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the plot options."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a sweep's run directory")
    parser.add_argument(
        "--table", default=None, help="tuning table for the bands (default: tune the run now)"
    )
    parser.add_argument("-o", "--output", default=None, help="directory (default RUN_DIR/plots)")


def config_from_args(args: argparse.Namespace) -> PlotConfig:
    """The PlotConfig of parsed arguments."""
    from osu_dl_bench.commands.plot import PlotConfig

    return PlotConfig(args.run_dir, args.table, args.output)


def start(cfg: PlotConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.runtime.start import init_mpi

    init_mpi()
    from osu_dl_bench.commands.plot import run_plot

    return run_plot(cfg)
