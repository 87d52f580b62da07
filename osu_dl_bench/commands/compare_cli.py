"""Options of ``osu-dl-bench compare``, parsed into a CompareConfig. No MPI, no pandas
here."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from osu_dl_bench.commands.arguments import add_rule_arguments
from osu_dl_bench.errors import UsageError
from osu_dl_bench.paths import check_writable_file

if TYPE_CHECKING:  # the work module loads pandas, which parsing must not wait for
    from osu_dl_bench.commands.compare import CompareConfig

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "two sweeps' agreement, and a tuning table's choices on another run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN_A RUN_B [--table T] [--referee R] [--nprocs 2,4] [--out FILE] [--risk P]
    [--indifference F]."""
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
        "--referee",
        default=None,
        metavar="R",
        help="a third sweep of the same algorithms on the same machine: RUN_B's choices are "
        "scored on it (captured speedup, mean and max regret); without it, on RUN_B's later "
        "launches held out from its decisions, where RUN_B has at least 4",
    )
    parser.add_argument(
        "--nprocs",
        "--np",
        dest="nprocs",
        default=None,
        help="only these process counts: 2,4 or 2-4 (default: every one both runs measured)",
    )
    parser.add_argument("--out", default=None, help="also write the report to this file")
    add_rule_arguments(parser)  # both runs decided by the same rule


def config_from_args(args: argparse.Namespace) -> CompareConfig:
    """The CompareConfig of parsed arguments; a bad --nprocs or an --out this process
    cannot write is refused here, before MPI starts and before any run is read."""
    from osu_dl_bench.commands.compare import CompareConfig

    nprocs = _process_counts(args.nprocs)
    check_writable_file("--out", args.out, make_parents=True)
    _check_runs(args.run_a, args.run_b)
    _check_referee(args.referee, args.run_b)
    return CompareConfig(
        args.run_a,
        args.run_b,
        args.table,
        nprocs,
        args.nprocs,
        args.out,
        args.referee,
        args.risk,
        args.indifference,
    )


def _check_runs(run_a: str, run_b: str) -> None:
    """RUN_A and RUN_B the same run is refused: a run agrees with itself by construction,
    and its between-period sd of 0 would be stored with it over any real estimate."""
    from osu_dl_bench.commands.compare import same_run

    if same_run(run_a, run_b):
        raise UsageError(
            f"RUN_A {run_a} and RUN_B {run_b}: the same run directory; give two sweeps of "
            "the same machine"
        )


def _check_referee(referee: str | None, run_b: str) -> None:
    """A referee that is RUN_B itself is refused: its choices would be scored on the
    measurements they were made from."""
    from osu_dl_bench.commands.compare import same_run

    if referee is not None and same_run(referee, run_b):
        raise UsageError(
            f"--referee {referee}: the same run as RUN_B, whose choices would be scored on "
            "the measurements they were made from; give a third sweep"
        )


def _process_counts(text: str | None) -> tuple[int, ...]:
    """--nprocs' counts (empty: not given), its errors naming --nprocs."""
    from osu_dl_bench.jobs.sweep_config import parse_process_counts  # loads pandas: only when given

    if not text:
        return ()
    try:
        return parse_process_counts(text)
    except UsageError as exc:  # it names sweep's --np
        raise UsageError(str(exc).replace("--np ", "--nprocs ", 1)) from None


def start(cfg: CompareConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    if cfg.table:
        from osu_dl_bench.runtime.start import init_mpi

        init_mpi()  # the registry, which the table is checked against, loads mpi4py
    from osu_dl_bench.commands.compare import run_compare

    return run_compare(cfg)
