"""Options of the tune and select subcommands. Declared apart from the code that runs them
because that code loads the registry, and with it mpi4py.MPI, which must wait until the
options are parsed (see osu_dl_bench.runtime.start)."""

from __future__ import annotations

import argparse

from osu_dl_bench.selection.names import FORCE_ENV, LIBRARIES, TABLE_DIR


def _probability(text: str) -> float:
    """An argparse type: a probability strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text}")
    return value


def add_tune_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the tune options."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a sweep's run directory")
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="NAME.json",
        help=f"table file (default {TABLE_DIR}/<run dir name>.json); the summary "
        "(NAME.summary.txt) and exports go next to it",
    )
    parser.add_argument(
        "--export",
        default=None,
        metavar="LIB[,LIB]",
        help=f"also write MPI libraries' own selection files: {', '.join(LIBRARIES)}",
    )
    parser.add_argument(
        "--risk",
        type=_probability,
        default=0.05,
        metavar="P",
        help="a candidate replaces native only where the chance that it is more than 5%% "
        "slower than native is below P (default 0.05)",
    )
    parser.add_argument("--dtype", default=None, help="tune on this dtype (default: most common)")
    parser.add_argument("--op", default=None, help="tune on this op (default: most common)")
    parser.add_argument(
        "--for",
        dest="for_model",
        default=None,
        metavar="MODEL",
        help="also judge the table on MODEL's gradient traffic (DDP's buckets of resnet50, "
        "vgg16, alexnet, cnn or resnet): its step time against native's and the best "
        "per-size choice's (needs torch: the train extra)",
    )


def add_select_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the select options."""
    parser.add_argument("--np", type=int, required=True, help="communicator size")
    parser.add_argument(
        "--size", required=True, help="message size(s) in bytes, K/M/G suffixes: 1M or 8,64K,1M"
    )
    parser.add_argument("--table", default=None, help="tuning table (none: native)")
    parser.add_argument("--collective", default=None, help="default: every collective in the table")
    parser.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    parser.add_argument("--ppn", type=int, default=None, help="ranks per node (default np/nodes)")
    parser.add_argument(
        "-d", "--device", default="cpu", help="buffer kind: cpu, cpu-registered or cuda"
    )
    parser.add_argument("--dtype", default="float32", help="element type, for eligibility")
    parser.add_argument("--op", default="sum", help="reduction op, for eligibility")
    parser.add_argument(
        "--force",
        default=None,
        metavar="COLL=ALG[,...]",
        help=f"force algorithms as {FORCE_ENV} does (replaces it)",
    )
    parser.add_argument(
        "--platform",
        default=None,
        metavar="F",
        help="answer outside the table (or without one) with the performance model on this "
        "platform file, run directory or shipped name",
    )
