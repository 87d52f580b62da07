"""``osu-dl-bench tune``'s command line: its options, parsed into a frozen TuneConfig, and
its start. Apart from the code that runs it (commands.tune) because that code loads the
registry, and with it mpi4py.MPI, which must wait until the options are parsed (see
osu_dl_bench.runtime.start)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from osu_dl_bench.commands.arguments import add_rule_arguments
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.names import LIBRARIES, TABLE_DIR

if TYPE_CHECKING:  # the work module loads the catalog and numpy; parsing must not wait
    from osu_dl_bench.commands.tune import TuneConfig

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "tuning table (+ summary, exports) from a run directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
        help=f"also write libraries' own selection files: {', '.join(LIBRARIES)}, nccl "
        "(NCCL's tuner-plugin CSV, from the GPU entries)",
    )
    add_rule_arguments(parser)
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


def _table_path(args: argparse.Namespace) -> Path:
    """-o, or TABLE_DIR/<run dir name>.json; a file ending in .json either way."""
    path = Path(args.output or Path(TABLE_DIR) / f"{Path(args.run_dir).resolve().name}.json")
    if path.suffix != ".json":
        raise UsageError(f"-o {path}: expected a file ending in .json")
    return path


def config_from_args(args: argparse.Namespace) -> TuneConfig:
    """The TuneConfig of parsed arguments, the table's name, --export and --for checked."""
    # Imported here: both load numpy, which parsing the options must not wait for.
    from osu_dl_bench.selection.exports import parse_exports
    from osu_dl_bench.train.traffic import check_model_name

    path = _table_path(args)
    exports = tuple(parse_exports(args.export))
    if args.for_model:
        check_model_name(args.for_model)  # before the work, not after it
    from osu_dl_bench.commands.tune import TuneConfig

    return TuneConfig(
        args.run_dir,
        path,
        exports,
        args.risk,
        args.indifference,
        args.dtype,
        args.op,
        args.for_model,
    )


def start(cfg: TuneConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.runtime.start import init_mpi

    init_mpi()  # the registry, which the table is checked against, loads mpi4py
    from osu_dl_bench.commands.tune import run_tune

    return run_tune(cfg)
