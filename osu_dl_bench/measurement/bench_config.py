"""The bench subcommand's config (BenchConfig) and the checks of its values (OSU's names).

commands.bench_cli parses the command line into it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from collectives.specs import SPECS
from collectives.units import doubling_sizes, format_size, parse_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime.start import DEFAULT_THREAD_LEVEL

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
    emulated_ppn: int | None = None  # --ranks-per-node: emulated nodes of this many ranks
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
