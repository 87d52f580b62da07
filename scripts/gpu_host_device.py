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
Each size's row is printed as soon as it is measured. Refused before anything is measured
(one message, exit 2 on every rank): a --json that exists or cannot be written, and a
largest size whose buffers (a pinned and a pageable host buffer and a device buffer, each
of the size) do not fit the node's or the GPU's free memory; a size whose buffers cannot be
allocated later ends the run there, the sizes before it printed and written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from osu_dl_bench.measurement.memory import Need

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


def copies_need(nbytes: int) -> Need:
    """What copy_calls holds at ``nbytes`` (measurement.memory.Need): a pinned and a
    pageable host buffer of that size, and the device buffer."""
    from collectives.device import pinned_bytes
    from osu_dl_bench.measurement.memory import Need

    return Need(
        "a copy",
        nbytes,
        pinned_bytes(nbytes) + nbytes,
        "a pinned and a pageable host buffer of the size",
        device_bytes=nbytes,
        device_parts="a device buffer of the size",
    )


def allocated(nbytes: int) -> tuple[list[Callable], Any]:
    """copy_calls(nbytes); UsageError where a buffer cannot be had (device memory, pinned
    memory past the locked-memory limit: cudaHostAlloc's error, host memory)."""
    import cupy

    from collectives.units import format_size
    from osu_dl_bench.errors import UsageError

    try:
        return copy_calls(nbytes)
    except (MemoryError, cupy.cuda.runtime.CUDARuntimeError) as error:
        raise UsageError(
            f"-m: {format_size(nbytes)}: cannot allocate the copies' buffers ({error}); "
            "choose a smaller -m"
        ) from None


def measure_size(comm, nbytes: int) -> dict[str, dict[str, float]]:
    """Every copy at ``nbytes``, interleaved, as median_interval's figures; the buffers
    allocated on every rank or on none (an agreed UsageError), so no rank waits in the
    timing loop's barrier for one that failed."""
    from collectives.specs import Buffers
    from osu_dl_bench.measurement.kernel import timed_round
    from osu_dl_bench.runtime.rank_agreement import agree_on_errors

    calls, device = agree_on_errors(comm, lambda: allocated(nbytes))
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
    """Powers of two in ``MIN:MAX`` (the suite's size syntax), every other one (x4); a
    UsageError where none is a byte or more."""
    from osu_dl_bench.measurement.bench_config import check_holds_an_element, parse_allocated_sizes

    low, high = parse_allocated_sizes(text, 1)
    check_holds_an_element(text, high)
    sizes, size = [], max(1, low)
    while size <= high:
        sizes.append(size)
        size *= 4
    return sizes


def cell(figures: dict[str, float]) -> str:
    """One copy's median GB/s and its interval, as the table shows it."""
    return f"{figures['gbs']:.2f} [{figures['gbs_low']:.2f}-{figures['gbs_high']:.2f}]"


HEADER = "# host<->device copies on one GPU: median GB/s [95% interval of the median]"


def header() -> str:
    """The table's column line."""
    return f"{'# size':<12}" + "".join(f"{label:>26}" for label in COPIES)


def row(size: int, figures: dict[str, dict[str, float]]) -> str:
    """One size's line: each copy's median GB/s [95% interval]."""
    return f"{size:<12}" + "".join(f"{cell(figures[label]):>26}" for label in COPIES)


def measure(comm, sizes: list[int], results: dict[int, dict]) -> None:
    """Measure every size into ``results``, rank 0 printing each size's row as it is
    measured: a size that fails (an agreed UsageError) leaves the sizes before it."""
    rank0 = comm.Get_rank() == 0
    if rank0:
        print(HEADER, header(), sep="\n", flush=True)
    for size in sizes:
        results[size] = measure_size(comm, size)
        if rank0:
            print(row(size, results[size]), flush=True)


def write_json(path: str, results: dict[int, dict]) -> None:
    """The figures as JSON at ``path`` (atomically); a UsageError where it cannot be."""
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.paths import os_reason, write_text_atomic

    text = json.dumps({str(k): v for k, v in results.items()}, indent=1)
    try:
        write_text_atomic(path, text)
    except OSError as error:
        raise UsageError(f"--json {path}: {os_reason(error)}") from None


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table (and write --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--sizes", default=DEFAULT_SIZES, help="MIN:MAX bytes")
    parser.add_argument("--json", default=None, help="also write the figures here (a new file)")
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
    from collectives.device import select_local_gpu
    from osu_dl_bench.measurement.memory import check_node_memory
    from osu_dl_bench.paths import check_new_file
    from osu_dl_bench.runtime.rank_agreement import on_rank0
    from osu_dl_bench.runtime.start import init_mpi

    comm = init_mpi("single").COMM_WORLD
    results: dict[int, dict] = {}
    problems = []
    try:
        # Before anything is measured: the output, this rank's GPU, the largest size's
        # buffers against the node's memory and the GPU's.
        on_rank0(comm, lambda: check_new_file("--json", args.json, "gpu_host_device"))
        select_local_gpu(comm)
        check_node_memory(comm, [copies_need(sizes[-1])])
        measure(comm, sizes, results)
    except UsageError as error:
        problems.append(str(error))
    try:
        if args.json and results:  # what was measured is kept, whatever came after
            on_rank0(comm, lambda: write_json(args.json, results))
    except UsageError as error:
        problems.append(str(error))
    if problems and comm.Get_rank() == 0:
        print("\n".join(f"gpu_host_device: {problem}" for problem in problems), file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
