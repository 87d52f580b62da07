"""The merge subcommand's options, parsed into a MergeConfig."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from osu_dl_bench.measurement import MIXABLE

if TYPE_CHECKING:  # the work module, loaded when the command runs
    from osu_dl_bench.commands.merge import MergeConfig

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "several sweeps' run directories as one"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN RUN [RUN ...] -o RUN."""
    parser.add_argument("runs", metavar="RUN", nargs="+", help="sweeps' run directories")
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="RUN",
        help="the merged run directory: new, or without results.csv and metadata.json",
    )
    parser.add_argument(
        "--allow-mixed",
        nargs="?",
        const=",".join(MIXABLE),
        default="",
        metavar="WHAT",
        help="merge runs that differ in these (comma list of "
        f"{', '.join(MIXABLE)}; alone: all): hosts for one sweep per allocation of one "
        "cluster; each run's are recorded under merged_from",
    )


def config_from_args(args: argparse.Namespace) -> MergeConfig:
    """The MergeConfig of parsed arguments."""
    from osu_dl_bench.commands.merge import MergeConfig

    return MergeConfig(tuple(args.runs), args.output, args.allow_mixed)


def start(cfg: MergeConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.commands.merge import run_merge

    return run_merge(cfg)  # no MPI: it copies rows and metadata
