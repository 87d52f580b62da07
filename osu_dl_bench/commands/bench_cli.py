"""The bench subcommand's options (OSU's names), parsed once into a BenchConfig."""

from __future__ import annotations

import argparse

from collectives.units import format_size
from osu_dl_bench.commands.arguments import DEVICE_HELP, positive_int, whole_number
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.bench_config import (
    BENCHMARKS,
    BW_WINDOW,
    LINKMAP,
    LINKMAP_MAX_MESSAGE_BYTES,
    LINKMAP_MESSAGE_BYTES,
    LINKMAP_REPETITIONS,
    LINKMAP_WARMUP_WINDOWS,
    LINKMAP_WINDOWS,
    MAX_ITERATIONS,
    MAX_REPETITIONS,
    POINT_TO_POINT,
    BenchConfig,
    check_holds_an_element,
    parse_allocated_sizes,
    parse_root,
    parse_size_range,
)
from osu_dl_bench.runtime.start import DEFAULT_THREAD_LEVEL, THREAD_LEVELS

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "OSU-style benchmark of a collective or p2p test"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the bench options on a (sub)parser."""
    parser.add_argument(
        "benchmark",
        choices=BENCHMARKS,
        help="collective, point-to-point test, or linkmap (every pair of nodes)",
    )
    parser.add_argument(
        "-m",
        "--message-size",
        default=None,
        metavar="[MIN:]MAX",
        help="message sizes in bytes, K/M/G suffixes (default 1:1M; latency/bw/bibw 0:4M)",
    )
    parser.add_argument(
        "-i",
        "--iterations",
        type=whole_number(1, MAX_ITERATIONS),
        default=None,
        help="timed iterations (default 1000 up to 8K, then 100)",
    )
    parser.add_argument(
        "-x",
        "--warmup",
        type=whole_number(0, MAX_ITERATIONS),
        default=None,
        help="warm-up iterations (default 100 up to 8K, then 10)",
    )
    parser.add_argument("-f", "--full", action="store_true", help="min, max and iterations")
    parser.add_argument(
        "-c",
        "--validation",
        action="store_true",
        help="check every element of every size against the expected result",
    )
    parser.add_argument("-l", "--in-place", action="store_true", help="use MPI_IN_PLACE")
    parser.add_argument(
        "-T",
        "--type",
        dest="dtype",
        default="float32",
        help="element type: float32 (default), float64, float16, int8, "
        "uint8, int16, int32, int64, uint32, uint64",
    )
    parser.add_argument(
        "--op", default="sum", help="sum (default), max, min, prod, band, bor, bxor"
    )
    parser.add_argument(
        "-k", "--root", default="fixed:0", help="fixed:N (default fixed:0) or rotate"
    )
    parser.add_argument(
        "-z",
        "--tail",
        action="store_true",
        help="P50 and P99 of the per-iteration maximum across ranks",
    )
    parser.add_argument(
        "--per-rank",
        action="store_true",
        help="per rank and per node: how late each rank arrives, how long it waits for the "
        "others, its P50/P99 (clocks aligned to rank 0's); kept in -o",
    )
    parser.add_argument(
        "--per-rank-raw",
        action="store_true",
        help="--per-rank, and every call's arrival and time per rank in the -o file",
    )
    parser.add_argument(
        "--bounds",
        action="store_true",
        help="also time, at every size, one copy of the message on its own device (the "
        "copy bound) and, with -d cuda, the copies a staged MPI call pays (staging)",
    )
    parser.add_argument("-d", "--device", default="cpu", help=DEVICE_HELP)
    parser.add_argument(
        "-a",
        "--algorithm",
        default="native",
        help="NAME[,NAME...] or all; parameters after ':', e.g. chain:seg=256K",
    )
    parser.add_argument(
        "-o", "--output", default=None, help="also write records to .csv/.json/.parquet"
    )
    parser.add_argument(
        "--thread-level",
        default=DEFAULT_THREAD_LEVEL,
        choices=THREAD_LEVELS,
        help="MPI thread level (default single: faster on MPICH)",
    )
    parser.add_argument(
        "--ranks-per-node",
        type=positive_int,
        default=None,
        help="emulate nodes of K ranks on one host (also OSU_DL_BENCH_RANKS_PER_NODE)",
    )
    parser.add_argument(
        "--table",
        default=None,
        help="tuning table for -a tuned, the runtime selector (without one it picks native)",
    )
    parser.add_argument(
        "--buckets",
        default=None,
        metavar="MODEL",
        help="allreduce only: replay one training step's gradient traffic, MODEL's DDP "
        "buckets back to back (resnet50, vgg16, alexnet, cnn, resnet); -i/-x count steps",
    )
    parser.add_argument(
        "--repetitions",
        type=whole_number(1, MAX_REPETITIONS),
        default=None,
        metavar="R",
        help=f"linkmap only: cycles over every pair of nodes, one latency and one bandwidth "
        f"sample per link each (default {LINKMAP_REPETITIONS}); linkmap's -m is the bandwidth "
        f"message size (default {format_size(LINKMAP_MESSAGE_BYTES)}, a window of "
        f"{BW_WINDOW}), -i/-x its windows per sample (default {LINKMAP_WINDOWS}/"
        f"{LINKMAP_WARMUP_WINDOWS}), -o a .json record",
    )


def check_bucket_replay(args: argparse.Namespace) -> None:
    """--buckets replays allreduce traffic whose sizes come from the model: refuse the
    options that would contradict it (the model's name is checked where it is built)."""
    if args.buckets is None:
        return
    if args.benchmark != "allreduce":
        raise UsageError(
            f"--buckets {args.buckets}: replays gradient allreduces: expected bench "
            f"allreduce, got bench {args.benchmark}"
        )
    if args.message_size is not None:
        raise UsageError(
            f"--buckets {args.buckets}: the model's buckets are the sizes: expected no -m, "
            f"got -m {args.message_size}"
        )


# The options linkmap has no use for, with their defaults: refused when given.
_NOT_FOR_LINKMAP = {
    "-f": ("full", False),
    "-c": ("validation", False),
    "-l": ("in_place", False),
    "-T": ("dtype", "float32"),
    "--op": ("op", "sum"),
    "-k": ("root", "fixed:0"),
    "-z": ("tail", False),
    "-d": ("device", "cpu"),
    "-a": ("algorithm", "native"),
    "--table": ("table", None),
    "--buckets": ("buckets", None),
    "--per-rank": ("per_rank", False),
    "--per-rank-raw": ("per_rank_raw", False),
    "--bounds": ("bounds", False),
}


def _linkmap_config(args: argparse.Namespace) -> BenchConfig:
    """bench linkmap: -m one size (the bandwidth message), -i/-x windows, --repetitions
    cycles, -o a .json record; the collectives' options refused."""
    for option, (dest, default) in _NOT_FOR_LINKMAP.items():
        if getattr(args, dest) != default:
            raise UsageError(
                f"bench linkmap: {option} has no meaning here (it measures host "
                "buffers of bytes between nodes, unchecked)"
            )
    text = args.message_size or format_size(LINKMAP_MESSAGE_BYTES)
    if ":" in text:
        raise UsageError(
            f"bench linkmap -m {text}: expected one size (the bandwidth message), e.g. -m 64K"
        )
    _, size = parse_size_range(
        text, 0, LINKMAP_MAX_MESSAGE_BYTES, f" (a window carries {BW_WINDOW} of them)"
    )
    if size < 1:
        raise UsageError(f"bench linkmap -m {text}: expected at least 1 byte")
    if args.output is not None and not args.output.lower().endswith(".json"):
        raise UsageError(
            f"bench linkmap -o {args.output}: expected a .json file (the record triage reads)"
        )
    return BenchConfig(
        benchmark=LINKMAP,
        min_size=size,
        max_size=size,
        iterations=LINKMAP_WINDOWS if args.iterations is None else args.iterations,
        warmup=LINKMAP_WARMUP_WINDOWS if args.warmup is None else args.warmup,
        output=args.output,
        thread_level=args.thread_level,
        emulated_ppn=args.ranks_per_node,
        repetitions=args.repetitions or LINKMAP_REPETITIONS,
    )


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """Build and check a BenchConfig from parsed arguments (no MPI needed)."""
    if args.benchmark == LINKMAP:
        return _linkmap_config(args)
    if args.repetitions is not None:
        raise UsageError(
            f"--repetitions {args.repetitions}: linkmap only, got bench {args.benchmark}"
        )
    check_bucket_replay(args)
    point_to_point = args.benchmark in POINT_TO_POINT
    if (args.per_rank or args.per_rank_raw) and (point_to_point or args.buckets):
        what = f"bench {args.benchmark}" if point_to_point else "--buckets"
        raise UsageError(
            f"--per-rank: times a collective's calls rank by rank; {what} has none "
            "(bench linkmap compares the links between nodes)"
        )
    if args.bounds and (point_to_point or args.buckets or args.benchmark == "barrier"):
        what = "--buckets" if args.buckets else f"bench {args.benchmark}"
        raise UsageError(
            f"--bounds: times copies of a collective's message beside it; {what} has none"
        )
    size_text = args.message_size or ("0:4M" if point_to_point else "1:1M")
    lo, hi = parse_allocated_sizes(size_text, default_min=0 if point_to_point else 1)
    if not point_to_point and args.benchmark != "barrier":
        check_holds_an_element(size_text, hi)
    if not args.algorithm.replace(",", "").strip():
        raise UsageError(
            f"-a {args.algorithm!r}: expected NAME[,NAME] or all, got {args.algorithm!r}"
        )
    return BenchConfig(
        benchmark=args.benchmark,
        min_size=lo,
        max_size=hi,
        iterations=args.iterations,
        warmup=args.warmup,
        full=args.full,
        validate=args.validation,
        in_place=args.in_place,
        dtype=args.dtype,
        op=args.op,
        root=parse_root(args.root),
        percentiles=args.tail,
        per_rank=args.per_rank or args.per_rank_raw,
        per_rank_raw=args.per_rank_raw,
        bounds=args.bounds,
        device=args.device,
        algorithms=args.algorithm,
        output=args.output,
        thread_level=args.thread_level,
        emulated_ppn=args.ranks_per_node,
        table=args.table,
        buckets=args.buckets,
    )


def start(cfg: BenchConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.measurement.records import check_output_path
    from osu_dl_bench.runtime.launcher import launcher_rank
    from osu_dl_bench.runtime.start import init_mpi

    if launcher_rank() == 0:  # only rank 0 writes -o
        check_output_path(cfg.output)
    mpi = init_mpi(cfg.thread_level)
    from osu_dl_bench.commands.bench import run_bench

    return run_bench(mpi.COMM_WORLD, cfg)
