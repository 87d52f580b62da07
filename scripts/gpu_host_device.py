"""Host-device copy bandwidth on this rank's GPU, each way, from pinned and from pageable
host memory, timed in interleaved rounds by the suite's one timing loop.

    mpiexec -n 1 python scripts/gpu_host_device.py [-m 1K:1G] [--json OUT.json]

What a staged MPI call pays around the call itself (collectives.device.staged) is one
device-to-host copy into pinned memory and one host-to-device copy back; a library that
stages through pageable memory pays the pageable rows. cupy's ``ndarray.set`` and
``ndarray.get`` with no stream are ``cudaMemcpy`` (cupy/_core/core.pyx): from pageable
memory the driver copies through a pinned bounce buffer of its own, which is why pageable
transfers are slower (CUDA C++ Best Practices Guide, "Pinned Memory").

Per size: the four copies, one call of each per iteration (measurement.kernel.timed_round,
interleaved, the clock stopped once the device is idle), and per copy the median GB/s
with the 95% interval of that median (a bootstrap over the iterations,
selection.paired.cluster_bootstrap with the iterations as one cluster: one launch, so the
interval says how well this launch's median is known, not how the next launch will differ).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

# The labels in the order they are timed within an iteration.
COPIES = ("h2d pinned", "d2h pinned", "h2d pageable", "d2h pageable")
DEFAULT_SIZES = "1K:1G"


def copy_calls(count: int) -> tuple[list[Callable], Any]:
    """One call per entry of COPIES, each moving ``count`` bytes once (calls of the
    registry's signature, their arguments ignored, as measurement.bounds' are), and the
    device buffer they copy to and from."""
    import cupy
    import cupyx

    device = cupy.zeros(count, np.uint8)
    pinned = cupyx.empty_pinned((count,), np.uint8)
    pinned[...] = 1  # touched: every page resident before the first timed copy
    pageable = np.ones(count, np.uint8)

    def h2d_pinned(send, recv, op, root) -> None:
        device.set(pinned)

    def d2h_pinned(send, recv, op, root) -> None:
        device.get(out=pinned)

    def h2d_pageable(send, recv, op, root) -> None:
        device.set(pageable)

    def d2h_pageable(send, recv, op, root) -> None:
        device.get(out=pageable)

    return [h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable], device


def iterations_for(nbytes: int) -> tuple[int, int]:
    """(timed, warm-up) iterations: OSU's 100/10 below 1 MiB, fewer above, at least 10."""
    if nbytes < 1 << 20:
        return 100, 10
    return max(10, min(100, (64 << 20) // nbytes * 10)), 2


def median_interval(seconds: np.ndarray, nbytes: int, seed: int) -> dict[str, float]:
    """Median GB/s of ``seconds`` per copy of ``nbytes`` and its 95% interval."""
    from osu_dl_bench.selection.paired import cluster_bootstrap

    logs = np.log(seconds[seconds > 0])
    low, high = cluster_bootstrap([logs], seed)
    median = float(np.median(logs))
    # Bandwidth falls as time rises: the interval's ends swap.
    return {
        "gbs": nbytes / math.exp(median) / 1e9,
        "gbs_low": nbytes / math.exp(high) / 1e9,
        "gbs_high": nbytes / math.exp(low) / 1e9,
        "median_us": math.exp(median) * 1e6,
        "iterations": int(logs.size),
    }


def measure_size(comm, nbytes: int) -> dict[str, dict[str, float]]:
    """Every copy at ``nbytes``, interleaved, as median_interval's figures."""
    from collectives.specs import Buffers
    from osu_dl_bench.measurement.kernel import timed_round

    calls, device = copy_calls(nbytes)
    timed, warmup = iterations_for(nbytes)
    order = range(len(calls))
    # A device buffer among the call's buffers: the loop then stops each clock once the
    # device is idle (collectives.device.settle_for). A copy from pinned memory returns
    # before it is done; timed without that wait, an H200 showed h2d at 13,167 GB/s.
    bufs = Buffers(device, None)
    scratch = np.zeros((len(calls), warmup))
    timed_round(comm.Barrier, calls, order, bufs, None, [0] * warmup, scratch, True)
    times = np.zeros((len(calls), timed))
    timed_round(comm.Barrier, calls, order, bufs, None, [0] * timed, times, True)
    return {
        label: median_interval(times[j], nbytes, seed=nbytes + j) for j, label in enumerate(COPIES)
    }


def sizes_from(text: str) -> list[int]:
    """Powers of two in ``MIN:MAX`` (the suite's size syntax), every other one (x4)."""
    from osu_dl_bench.measurement.bench_config import parse_allocated_sizes

    low, high = parse_allocated_sizes(text, 1)
    sizes, size = [], max(1, low)
    while size <= high:
        sizes.append(size)
        size *= 4
    return sizes


def cell(figures: dict[str, float]) -> str:
    """One copy's median GB/s and its interval, as the table shows it."""
    return f"{figures['gbs']:.2f} [{figures['gbs_low']:.2f}-{figures['gbs_high']:.2f}]"


def lines(results: dict[int, dict[str, dict[str, float]]]) -> list[str]:
    """The table: per size, each copy's median GB/s [95% interval]."""
    out = [f"{'# size':<12}" + "".join(f"{label:>26}" for label in COPIES)]
    for size, row in results.items():
        out.append(f"{size:<12}" + "".join(f"{cell(row[label]):>26}" for label in COPIES))
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table (and write --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--sizes", default=DEFAULT_SIZES, help="MIN:MAX bytes")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    from osu_dl_bench.errors import UsageError

    try:
        sizes = sizes_from(args.sizes)
    except (UsageError, ValueError, argparse.ArgumentTypeError) as error:
        print(f"gpu_host_device: -m {args.sizes}: {error}", file=sys.stderr)
        return 2
    try:
        import cupy  # noqa: F401
    except ImportError:
        print("gpu_host_device: cupy is not importable: no GPU copies to time", file=sys.stderr)
        return 77
    from osu_dl_bench.runtime.start import init_mpi

    comm = init_mpi("single").COMM_WORLD
    results = {size: measure_size(comm, size) for size in sizes}
    if comm.Get_rank() == 0:
        print("# host<->device copies on one GPU: median GB/s [95% interval of the median]")
        print("\n".join(lines(results)))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump({str(k): v for k, v in results.items()}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
