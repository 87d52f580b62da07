"""Options of the tune and select subcommands, parsed into a TuneConfig and a SelectConfig.
Declared apart from the code that runs them because that code loads the registry, and with
it mpi4py.MPI, which must wait until the options are parsed (see osu_dl_bench.runtime.start)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.names import FORCE_ENV, LIBRARIES, TABLE_DIR


@dataclass(frozen=True)
class TuneConfig:
    """The sweep to tune, the table file to write (its summary and exports beside it), the
    libraries to export for, the decision's risk, the dtype and op to tune on (None: the
    most common) and the model whose gradient traffic judges the table (None: none)."""

    run_dir: str
    table_path: Path
    exports: tuple[str, ...]
    risk: float
    dtype: str | None
    op: str | None
    for_model: str | None


@dataclass(frozen=True)
class SelectConfig:
    """The calls to explain (communicator size, sizes, job shape, buffer kind, element type,
    op, one collective or None for every one in the table) and what decides them: the
    table, forced algorithms (None: the environment's) and the model's platform."""

    nprocs: int
    sizes: tuple[int, ...]
    nodes: int
    ppn: int | None
    device: str
    dtype: str
    op: str
    collective: str | None
    table: str | None
    force: Mapping[str, str] | None
    platform: str | None


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


def _table_path(args: argparse.Namespace) -> Path:
    """-o, or TABLE_DIR/<run dir name>.json; a file ending in .json either way."""
    path = Path(args.output or Path(TABLE_DIR) / f"{Path(args.run_dir).resolve().name}.json")
    if path.suffix != ".json":
        raise UsageError(f"-o {path}: expected a file ending in .json")
    return path


def tune_config_from_args(args: argparse.Namespace) -> TuneConfig:
    """The TuneConfig of parsed arguments, the table's name, --export and --for checked."""
    # Imported here: both load numpy, which parsing the options must not wait for.
    from osu_dl_bench.selection.exports import parse_exports
    from osu_dl_bench.train.traffic import check_model_name

    path = _table_path(args)
    exports = tuple(parse_exports(args.export))
    if args.for_model:
        check_model_name(args.for_model)  # before the work, not after it
    return TuneConfig(args.run_dir, path, exports, args.risk, args.dtype, args.op, args.for_model)


def _check_shape(args: argparse.Namespace) -> None:
    """--np, --nodes and --ppn describe a job that can exist."""
    from collectives.shape import JobShape

    layout = JobShape(args.np, args.nodes, args.ppn).problem()
    if layout:
        ppn = "" if args.ppn is None else f" --ppn {args.ppn}"
        raise UsageError(f"--np {args.np} --nodes {args.nodes}{ppn}: {layout}")


def _sizes(text: str) -> tuple[int, ...]:
    """--size's comma list of sizes, at least one."""
    from collectives.units import parse_size

    sizes = tuple(parse_size(s) for s in text.split(",") if s.strip())
    if not sizes:
        raise UsageError(f"--size {text!r}: expected at least one size, e.g. 8,64K,1M")
    return sizes


def select_config_from_args(args: argparse.Namespace) -> SelectConfig:
    """The SelectConfig of parsed arguments: the job's shape, -d, --force, --size and
    --collective checked (the table and the platform are read when the command runs)."""
    # Imported here: the catalog loads numpy, which parsing the options must not wait for.
    from collectives import SPECS
    from collectives.buffers import DEVICES
    from osu_dl_bench.selection.selector import parse_force

    _check_shape(args)
    if args.device not in DEVICES:
        raise UsageError(f"-d {args.device}: expected one of {', '.join(DEVICES)}")
    force = None if args.force is None else MappingProxyType(parse_force(args.force, "--force"))
    sizes = _sizes(args.size)
    if args.collective and args.collective not in SPECS:
        raise UsageError(f"--collective {args.collective}: expected one of {', '.join(SPECS)}")
    return SelectConfig(
        nprocs=args.np,
        sizes=sizes,
        nodes=args.nodes,
        ppn=args.ppn,
        device=args.device,
        dtype=args.dtype,
        op=args.op,
        collective=args.collective,
        table=args.table,
        force=force,
        platform=args.platform,
    )
