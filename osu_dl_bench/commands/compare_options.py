"""Options of ``osu-dl-bench compare``. No MPI, no pandas here."""

from __future__ import annotations

import argparse


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN_A RUN_B [--table T] [--nprocs 2,4] [--out FILE]."""
    parser.add_argument(
        "run_a", metavar="RUN_A", help="a sweep's run directory: its decisions are judged"
    )
    parser.add_argument(
        "run_b",
        metavar="RUN_B",
        help="another sweep of the same algorithms on the same machine: the judge",
    )
    parser.add_argument(
        "--table",
        default=None,
        help="judge this tuning table's choices (the runtime selector's) on RUN_B instead of "
        "RUN_A's own decisions (RUN_A still gives the shift report)",
    )
    parser.add_argument(
        "--nprocs",
        "--np",
        dest="nprocs",
        default=None,
        help="only these process counts: 2,4 or 2-4 (default: every one both runs measured)",
    )
    parser.add_argument("--out", default=None, help="also write the report to this file")
