"""Times collectives the way OSU does and returns records; never prints.

Timing (OSU c/mpi/collective/blocking/osu_allreduce.c): each iteration runs an untimed
barrier, then the timer wraps only the call; each rank averages its own iteration times
and min/avg/max are taken across ranks of those means. We also keep every iteration's
maximum across ranks, the honest latency of a collective (open-mpi/ompi #11022), and
report its P50 and P99. Several algorithms are interleaved within every iteration round
(A B C A B C ...) so a change in machine speed hits all of them alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from collectives import SPECS, CallContext, CallShape, CollectiveSpec, Variant
from collectives.buffers import to_host
from collectives.dtypes import ElementType
from collectives.ops import ReduceOp
from osu_dl_bench.measurement.options import BenchConfig
from osu_dl_bench.measurement.records import BenchRecord
from osu_dl_bench.runtime import Topology

# Test-only hook: "corrupt" changes one element of the last rank's result, to prove -c
# fails; "raise" raises on the last rank, to prove one rank's error aborts the job.
FAULT_ENV = "OSU_DL_BENCH_INJECT_FAULT"


@dataclass
class Candidate:
    """A bound variant with its buffers and per-iteration times at the current size."""

    variant: Variant
    call: Any
    send: Any = None
    recv: Any = None
    times: np.ndarray | None = None


@dataclass(frozen=True)
class Plan:
    """The variants that will run and the ones skipped, with the reason."""

    eligible: list[Variant]
    skipped: list[tuple[Variant, str]]


def plan_variants(variants: list[Variant], ctx: CallContext) -> Plan:
    """Split variants into eligible ones and skipped ones with their reasons."""
    eligible, skipped = [], []
    for variant in variants:
        reason = variant.ineligible_reason(ctx)
        if reason is None:
            eligible.append(variant)
        else:
            skipped.append((variant, reason))
    return Plan(eligible, skipped)


@dataclass(frozen=True)
class Setting:
    """What stays fixed over a run's sizes."""

    spec: CollectiveSpec
    etype: ElementType
    op: ReduceOp | None
    xp: Any


def _run_rounds(
    comm: MPI.Comm, cands: list[Candidate], op: ReduceOp | None, roots: list[int], timed: bool
) -> None:
    """The hot loop: one round per iteration, every candidate once per round."""
    barrier, wtime = comm.Barrier, MPI.Wtime
    for it, root in enumerate(roots):
        for cand in cands:
            barrier()
            start = wtime()
            cand.call(cand.send, cand.recv, op, root)
            if timed:
                cand.times[it] = wtime() - start


def _cross_rank_stats(comm: MPI.Comm, times: np.ndarray) -> dict[str, Any]:
    """OSU's min/avg/max of per-rank means, and percentiles of per-iteration maxima (us)."""
    mean = np.array([times.mean() if times.size else 0.0])
    lo, hi, total = np.empty(1), np.empty(1), np.empty(1)
    comm.Allreduce(mean, lo, MPI.MIN)
    comm.Allreduce(mean, hi, MPI.MAX)
    comm.Allreduce(mean, total, MPI.SUM)
    iter_max = np.empty_like(times)
    comm.Allreduce(times, iter_max, MPI.MAX)
    iter_max_us = iter_max * 1e6
    has = iter_max_us.size > 0
    return {
        "avg_us": float(total[0] / comm.Get_size() * 1e6),
        "min_us": float(lo[0] * 1e6),
        "max_us": float(hi[0] * 1e6),
        "p50_us": float(np.percentile(iter_max_us, 50)) if has else 0.0,
        "p99_us": float(np.percentile(iter_max_us, 99)) if has else 0.0,
        "iter_max_us": tuple(round(float(t), 3) for t in iter_max_us),
    }


def count_wrong(actual: Any, expected: np.ndarray, etype: ElementType) -> int:
    """Elements of ``actual`` that differ from ``expected`` beyond the dtype's tolerance."""
    got = to_host(actual)
    if etype.is_integer:
        return int(np.count_nonzero(got != expected))
    got64, want64 = got.astype(np.float64), expected.astype(np.float64)
    return int(np.count_nonzero(np.abs(got64 - want64) > etype.rtol * np.abs(want64)))


def _validate(
    comm: MPI.Comm, cand: Candidate, setting: Setting, n: int, in_place: bool, roots: list[int]
) -> int:
    """Run the candidate once per root on fresh inputs; wrong elements summed over ranks."""
    spec, rank, nprocs = setting.spec, comm.Get_rank(), comm.Get_size()
    wrong = 0
    for root in roots:
        shape = CallShape(n, nprocs, rank, root, in_place)
        bufs = spec.allocate(setting.xp, setting.etype.dtype, shape)
        spec.fill(bufs, shape, setting.op)
        comm.Barrier()
        cand.call(bufs.send, bufs.recv, setting.op, root)
        output = spec.output(bufs, shape)
        if output is None:
            continue
        if os.environ.get(FAULT_ENV) == "corrupt" and rank == nprocs - 1 and len(output):
            output[-1] = output[-1] + 1
        wrong += count_wrong(
            output, spec.expected(shape, setting.etype.dtype, setting.op), setting.etype
        )
    total = np.array([wrong], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, total, MPI.SUM)
    return int(total[0])


def _record(
    cfg: BenchConfig,
    setting: Setting,
    topo: Topology,
    variant: Variant,
    n: int,
    stats: dict[str, Any],
    iterations: int,
    wrong: int | None,
) -> BenchRecord:
    spec, size = setting.spec, n * setting.etype.itemsize
    seconds = stats["avg_us"] * 1e-6
    algbw = spec.algbw_bytes(size, topo.nprocs) / seconds / 1e9 if seconds > 0 else 0.0
    return BenchRecord(
        collective=spec.name,
        algorithm=variant.label,
        backend=variant.algorithm.backend,
        dtype=setting.etype.name,
        op=setting.op.name if setting.op else None,
        size_bytes=size,
        count=n,
        nprocs=topo.nprocs,
        nodes=topo.nodes,
        ppn=topo.ppn,
        device=cfg.device,
        in_place=cfg.in_place,
        root=str(cfg.root) if spec.rooted else None,
        iterations=iterations,
        algbw_gbs=algbw,
        busbw_gbs=algbw * spec.busbw_factor(topo.nprocs),
        validation=None if wrong is None else ("fail" if wrong else "pass"),
        wrong_elements=wrong,
        **stats,
    )


def _element_counts(cfg: BenchConfig, setting: Setting) -> list[int]:
    """Element count per size; sizes below one element are dropped, as in OSU."""
    if setting.spec.name == "barrier":
        return [0]
    counts = [size // setting.etype.itemsize for size in cfg.sizes()]
    return [n for n in counts if n > 0]


def measure_collective(
    comm: MPI.Comm, cfg: BenchConfig, setting: Setting, topo: Topology, variants: list[Variant]
) -> Iterator[list[BenchRecord]]:
    """Yield, size by size, one record per variant (all interleaved within each size)."""
    spec, rank, nprocs = setting.spec, comm.Get_rank(), comm.Get_size()
    cands = [Candidate(v, v.bind(comm)) for v in variants]
    if os.environ.get(FAULT_ENV) == "raise" and rank == nprocs - 1:
        raise RuntimeError("fault injected on the last rank (test hook)")
    for n in _element_counts(cfg, setting):
        iterations, warmup = cfg.iterations_for(n * setting.etype.itemsize)
        shape = CallShape(n, nprocs, rank, cfg.root.fixed, cfg.in_place)
        for cand in cands:
            bufs = spec.allocate(setting.xp, setting.etype.dtype, shape)
            spec.fill(bufs, shape, setting.op)
            cand.send, cand.recv = bufs.send, bufs.recv
            cand.times = np.zeros(iterations)
        _run_rounds(
            comm,
            cands,
            setting.op,
            [cfg.root.root_at(i, nprocs) for i in range(warmup)],
            timed=False,
        )
        _run_rounds(
            comm,
            cands,
            setting.op,
            [cfg.root.root_at(i, nprocs) for i in range(iterations)],
            timed=True,
        )
        records = []
        for cand in cands:
            stats = _cross_rank_stats(comm, cand.times)
            wrong = None
            if cfg.validate:
                roots = list(range(nprocs)) if cfg.root.rotate else [cfg.root.fixed]
                wrong = _validate(comm, cand, setting, n, cfg.in_place, roots)
            records.append(_record(cfg, setting, topo, cand.variant, n, stats, iterations, wrong))
        yield records


def spec_for(benchmark: str) -> CollectiveSpec:
    """The CollectiveSpec of a collective benchmark."""
    return SPECS[benchmark]
