"""The triage subcommand's options, parsed into a TriageConfig."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from osu_dl_bench.diagnosis import MIN_SHARE
from osu_dl_bench.errors import UsageError

if TYPE_CHECKING:  # the work module loads pandas, which parsing must not wait for
    from osu_dl_bench.commands.triage import TriageConfig

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "which ranks and nodes are late or slow, from per-rank timing"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """triage's options."""
    parser.add_argument(
        "source",
        metavar="RUN_OR_FILE",
        help="a sweep's run directory, or a file written by bench --per-rank -o",
    )
    parser.add_argument(
        "--min-share",
        type=float,
        default=MIN_SHARE,
        help=f"name a rank only where its lag exceeds its peers' by this share of the "
        "call's own time (the call less the wait for the latest rank) "
        f"(default {MIN_SHARE:g})",
    )


def config_from_args(args: argparse.Namespace) -> TriageConfig:
    """The checked options."""
    from osu_dl_bench.commands.triage import TriageConfig

    if not (math.isfinite(args.min_share) and 0 <= args.min_share < 100):
        raise UsageError(f"--min-share {args.min_share}: expected 0 or more, below 100")
    return TriageConfig(Path(args.source), args.min_share)


def start(cfg: TriageConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.commands.triage import run_triage

    return run_triage(cfg)  # no MPI: it reads stored timings
