"""``osu-dl-bench select``'s command line: its options, parsed into a frozen SelectConfig,
and its start (what the runtime selector would pick for a call, and why: commands.tune)."""

from __future__ import annotations

import argparse
from types import MappingProxyType
from typing import TYPE_CHECKING

from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.names import FORCE_ENV

if TYPE_CHECKING:  # the work module loads the catalog and numpy; parsing must not wait
    from osu_dl_bench.commands.tune import SelectConfig

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "what the runtime selector would pick, and why"


def add_arguments(parser: argparse.ArgumentParser) -> None:
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


def config_from_args(args: argparse.Namespace) -> SelectConfig:
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
    from osu_dl_bench.commands.tune import SelectConfig

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


def start(cfg: SelectConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.runtime.start import init_mpi

    init_mpi()
    from osu_dl_bench.commands.tune import run_select

    return run_select(cfg)
