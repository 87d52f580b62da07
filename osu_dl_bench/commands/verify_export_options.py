"""Options of the verify-export subcommand (declared apart from the code that runs it, as
every command's options are, so parsing them loads no MPI)."""

from __future__ import annotations

import argparse

DEFAULT_NPROCS = "2,4"
DEFAULT_SIZES = "8:16M"
DEFAULT_LAUNCHES = 3
DEFAULT_BUDGET = 1.0


def add_verify_export_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verify-export options."""
    parser.add_argument(
        "file",
        metavar="FILE",
        help="an exported selection file: NAME.mpich.json (MPICH) or NAME.openmpi.rules "
        "(Open MPI's classic dynamic rules)",
    )
    parser.add_argument(
        "--np", default=DEFAULT_NPROCS, metavar="LIST", help=f"process counts ({DEFAULT_NPROCS})"
    )
    parser.add_argument(
        "-m",
        "--message-size",
        default=DEFAULT_SIZES,
        metavar="[MIN:]MAX",
        help=f"sizes in bytes, doubling (default {DEFAULT_SIZES})",
    )
    parser.add_argument(
        "--collectives",
        default="allreduce,bcast",
        help="collectives the file covers (default allreduce,bcast)",
    )
    parser.add_argument(
        "--launches",
        type=int,
        default=DEFAULT_LAUNCHES,
        metavar="K",
        help=f"launches with and without the file, interleaved (default {DEFAULT_LAUNCHES})",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET,
        metavar="SECONDS",
        help=f"timed seconds per point over all launches (default {DEFAULT_BUDGET:g})",
    )
    parser.add_argument(
        "--mpi",
        choices=("mpich", "openmpi"),
        default=None,
        help="the MPI library the jobs run, as sweep --mpi (default: the one mpi4py finds)",
    )
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="RUN_DIR",
        help="run directory of the measurements (default: FILE's name + '.verify' beside it)",
    )
