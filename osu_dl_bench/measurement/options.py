"""The bench subcommand's options (OSU's names) parsed once into a BenchConfig."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass

from collectives.specs import SPECS
from collectives.units import doubling_sizes, format_size, parse_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime.start import DEFAULT_THREAD_LEVEL, THREAD_LEVELS

# Declared here, not in collectives.buffers: options are parsed before MPI is loaded.
DEVICE_HELP = (
    "buffer kind: cpu (numpy), cpu-registered (numpy in memory the node's ranks can map, "
    "as NCCL's registered buffers: the cma algorithms then copy with plain loads) or "
    "cuda (cupy)"
)

# The collectives collectives.specs describes, in its order (reading it starts no MPI).
COLLECTIVES = tuple(SPECS)
POINT_TO_POINT = ("latency", "bw", "bibw")
# Point-to-point latency and bandwidth between every pair of nodes (measurement.linkmap).
LINKMAP = "linkmap"
BENCHMARKS = COLLECTIVES + POINT_TO_POINT + (LINKMAP,)
# OSU's defaults (c/util/osu_util.h): iterations and warm-up up to 8 KiB, then above it.
LARGE_MESSAGE_SIZE = 8192
DEFAULT_ITERATIONS = {"small": 1000, "large": 100}
DEFAULT_WARMUP = {"small": 100, "large": 10}
# OSU's pt2pt defaults differ: latency runs more, bandwidth tests fewer windows.
P2P_ITERATIONS = {"latency": (10000, 1000), "bw": (100, 20), "bibw": (100, 20)}
P2P_WARMUP = {"latency": (1000, 100), "bw": (10, 2), "bibw": (10, 2)}
BW_WINDOW = 64
# -i and -x: beyond ten million calls a run outlasts any job, and the per-iteration times
# (8 bytes each) would take memory before the first call.
MAX_ITERATIONS = 10**7
# Sizes nothing can describe (a typo such as 1:99999999999G): refused by every -m.
MAX_SIZE_BYTES = 1 << 50
# linkmap's bandwidth message: a window of BW_WINDOW carries 4 MiB, 50 times tbf's 80 KB
# burst on the cluster on one machine and far above a 1-10 Gbit/s link's bandwidth-delay
# product; OSU bw between two of its nodes reaches the shaped rate from 2 KiB on (1 Gbit/s:
# 115-124 MB/s from 2 KiB to 4 MiB; 100 Mbit/s: 11.9 MB/s from 16 KiB). osu_bw.c's 4 MiB
# would make a window 256 MiB: 21 s per sample at 100 Mbit/s. On faster fabrics raise -m
# until a window lasts a few milliseconds.
LINKMAP_MESSAGE_BYTES = 64 << 10
# A window of 64 messages of at most this size (4 GiB) takes 0.3 s at 100 Gbit/s.
LINKMAP_MAX_MESSAGE_BYTES = 64 << 20
# Windows per bandwidth sample and untimed ones before it: a sample follows the pair's
# latency phase, so the connection is made and the first window pays no set-up.
LINKMAP_WINDOWS, LINKMAP_WARMUP_WINDOWS = 1, 0
# Cycles over every pair, one sample per link each: a 95% interval for a median from n
# samples by order statistics needs n >= 6 (at n = 5 even [min, max] covers 93.8%); at 10
# it is [2nd, 9th] (97.9%; Conover, "Practical Nonparametric Statistics", 3rd ed., 3.2).
LINKMAP_REPETITIONS = 10
MAX_REPETITIONS = 10_000


def host_memory_bytes() -> int:
    """This host's physical memory (MAX_SIZE_BYTES where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return MAX_SIZE_BYTES


@dataclass(frozen=True)
class RootPolicy:
    """-k: a fixed root, or one that rotates every iteration."""

    rotate: bool
    fixed: int = 0

    def root_at(self, iteration: int, nprocs: int) -> int:
        """The root of a given iteration."""
        return iteration % nprocs if self.rotate else self.fixed

    def __str__(self) -> str:
        return "rotate" if self.rotate else f"fixed:{self.fixed}"


@dataclass(frozen=True)
class BenchConfig:
    """Every option of one bench run."""

    benchmark: str
    min_size: int = 1
    max_size: int = 1 << 20
    iterations: int | None = None
    warmup: int | None = None
    full: bool = False
    validate: bool = False
    in_place: bool = False
    dtype: str = "float32"
    op: str = "sum"
    root: RootPolicy = RootPolicy(rotate=False)
    percentiles: bool = False
    # Per-rank timing (measurement.ranks): summaries printed and kept; raw: every call's
    # stamps kept in the -o file too.
    per_rank: bool = False
    per_rank_raw: bool = False
    # Also time the message's copy on its device, and on a GPU the staging copies
    # (measurement.bounds).
    bounds: bool = False
    device: str = "cpu"
    algorithms: str = "native"
    output: str | None = None
    thread_level: str = DEFAULT_THREAD_LEVEL
    ranks_per_node: int | None = None
    # Tuning table for the 'tuned' algorithm (the runtime selector); None: native.
    table: str | None = None
    # A model whose DDP gradient buckets are replayed instead of -m's sizes (allreduce).
    buckets: str | None = None
    # linkmap: cycles over every pair of nodes (None for the other benchmarks).
    repetitions: int | None = None

    @property
    def is_point_to_point(self) -> bool:
        """latency, bw and bibw run between two ranks, not as a collective."""
        return self.benchmark in POINT_TO_POINT

    def sizes(self) -> list[int]:
        """Message sizes: MIN, 2 MIN, ... up to MAX (OSU's doubling loop)."""
        return doubling_sizes(self.min_size, self.max_size)

    def iterations_for(self, size: int) -> tuple[int, int]:
        """(timed iterations, warm-up iterations) at a message size."""
        large = size > LARGE_MESSAGE_SIZE
        if self.is_point_to_point:
            default_iters = P2P_ITERATIONS[self.benchmark][large]
            default_warm = P2P_WARMUP[self.benchmark][large]
        else:
            default_iters = DEFAULT_ITERATIONS["large" if large else "small"]
            default_warm = DEFAULT_WARMUP["large" if large else "small"]
        iters = self.iterations if self.iterations is not None else default_iters
        warm = self.warmup if self.warmup is not None else default_warm
        return iters, warm


def parse_size_range(
    text: str, default_min: int, most: int = MAX_SIZE_BYTES, why: str = ""
) -> tuple[int, int]:
    """-m [MIN:]MAX -> (MIN, MAX) in bytes, MAX at most ``most`` (``why`` says why)."""
    lo_text, sep, hi_text = text.rpartition(":")
    lo = parse_size(lo_text) if sep and lo_text else default_min
    hi = parse_size(hi_text)
    if lo > hi:
        raise UsageError(f"-m {text}: minimum size {lo} is larger than maximum size {hi}")
    if hi > most:
        raise UsageError(
            f"-m {text}: sizes above {format_size(most)} are refused{why}, got {format_size(hi)}"
        )
    return lo, hi


def parse_allocated_sizes(text: str, default_min: int) -> tuple[int, int]:
    """-m of the commands that allocate buffers of each size on every rank (bench, sweep):
    a size past this host's memory fails here, not in the kernel's allocator."""
    return parse_size_range(
        text, default_min, host_memory_bytes(), " (every rank allocates buffers of that size)"
    )


def check_holds_an_element(text: str, hi: int, itemsize: int = 1) -> None:
    """Refuse -m where no size holds one element (OSU drops such sizes: nothing would run);
    without the element type at hand, itemsize 1 refuses only all-zero ranges."""
    if hi < itemsize:
        unit = f" of {itemsize} B" if itemsize > 1 else ""
        raise UsageError(f"-m {text}: no size holds one element{unit}: nothing would be measured")


def parse_root(text: str) -> RootPolicy:
    """-k fixed:N | rotate."""
    if text == "rotate":
        return RootPolicy(rotate=True)
    kind, _, value = text.partition(":")
    if kind == "fixed" and value.isdigit():
        return RootPolicy(rotate=False, fixed=int(value))
    raise UsageError(f"-k {text!r}: expected fixed:N (N >= 0) or rotate")


def whole_number(least: int, most: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``least`` to ``most``."""

    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-")
        value = int(text) if digits.isdigit() and len(digits) <= 20 else least - 1
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {least} to {most}, got {text!r}"
            )
        return value

    return parse


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
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
        ranks_per_node=args.ranks_per_node,
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
        ranks_per_node=args.ranks_per_node,
        table=args.table,
        buckets=args.buckets,
    )
