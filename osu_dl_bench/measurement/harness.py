"""bench's collectives, size by size, through the kernel's OSU mode; returns records.
What a timed call is, and the statistics, are the kernel's (kernel.py). On ``-d cuda`` it
chooses the rank's GPU first, and stages MPI algorithms through host memory where MPI is
not CUDA-aware (collectives.device): the one line it prints, on rank 0, says so."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from collectives import CollectiveSpec, Variant
from collectives.device import STAGING_NOTE, needs_staging
from collectives.dtypes import ElementType
from collectives.ops import ReduceOp
from collectives.registry import BoundCalls
from osu_dl_bench.measurement.bench_config import BenchConfig
from osu_dl_bench.measurement.bounds import BACKEND as bounds_backend
from osu_dl_bench.measurement.bounds import bound_calls, bound_labels
from osu_dl_bench.measurement.kernel import (
    FAULT_ENV,
    OsuStats,
    OsuTiming,
    device_calls,
    measure_osu,
    prepare_inputs,
)
from osu_dl_bench.measurement.ranks import (
    ClockSync,
    RankTimes,
    gather_rank_times,
    rank_summaries,
    summaries_of,
    synchronise_clocks,
)
from osu_dl_bench.measurement.records import BenchRecord
from osu_dl_bench.runtime.topology import Topology


@dataclass(frozen=True)
class Setting:
    """What stays fixed over a run's sizes."""

    spec: CollectiveSpec
    etype: ElementType
    op: ReduceOp | None
    xp: Any


def bench_record(
    cfg: BenchConfig,
    setting: Setting,
    topo: Topology,
    label: tuple[str, str],
    n: int,
    stats: OsuStats,
    iterations: int,
    wrong: int | None,
    ranks: RankEvidence | None = None,
) -> BenchRecord:
    """One size's record of the candidate ``label`` (its name and backend)."""
    spec, size = setting.spec, n * setting.etype.itemsize
    seconds = stats.avg_us * 1e-6
    # A bound copies one message of ``size`` bytes once, whatever the collective counts
    # and whatever the ranks: no p blocks, no bus factor.
    bound = label[1] == bounds_backend
    moved = size if bound else spec.algbw_bytes(size, topo.nprocs)
    algbw = moved / seconds / 1e9 if seconds > 0 else 0.0
    bus_factor = 1.0 if bound else spec.busbw_factor(topo.nprocs)
    return BenchRecord(
        collective=spec.name,
        algorithm=label[0],
        backend=label[1],
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
        busbw_gbs=algbw * bus_factor,
        validation=None if wrong is None else ("fail" if wrong else "pass"),
        wrong_elements=wrong,
        **asdict(stats),
        **(ranks.record_fields() if ranks else {}),
    )


@dataclass(frozen=True)
class RankEvidence:
    """One candidate's per-rank timing at one point, as a record keeps it."""

    table: np.ndarray  # (ranks, ranks.SUMMARY_FIELDS)
    nodes: tuple[str, ...]
    clock: ClockSync
    raw: RankTimes | None  # every call's stamps, with --per-rank-raw

    def record_fields(self) -> dict[str, Any]:
        """BenchRecord's per_rank and clock_residual_us."""
        summaries = [s.as_dict() for s in summaries_of(self.table, self.nodes)]
        if self.raw is not None:
            raw = self.raw.raw()
            for r, summary in enumerate(summaries):
                summary.update({name: values[r] for name, values in raw.items()})
        return {
            "per_rank": tuple(summaries),
            "clock_residual_us": round(self.clock.residual * 1e6, 3),
        }


def _rank_evidence(
    comm: MPI.Comm, cfg: BenchConfig, topo: Topology, timing: OsuTiming, clock: ClockSync | None
) -> list[RankEvidence | None]:
    """Per candidate, on rank 0, its per-rank timing (None without --per-rank or elsewhere)."""
    if clock is None or timing.times is None or timing.arrivals is None:
        return [None] * len(timing.stats)
    tables = rank_summaries(comm, timing.arrivals, timing.times, clock)
    raw = (
        gather_rank_times(comm, timing.arrivals, timing.times, clock) if cfg.per_rank_raw else None
    )
    if tables is None:
        return [None] * len(timing.stats)
    raws = raw or [None] * len(tables)
    return [
        RankEvidence(table, topo.rank_nodes, clock, stamps)
        for table, stamps in zip(tables, raws, strict=True)
    ]


def _element_counts(cfg: BenchConfig, setting: Setting) -> list[int]:
    """Element count per size; sizes below one element are dropped, as in OSU."""
    if setting.spec.name == "barrier":
        return [0]
    counts = [size // setting.etype.itemsize for size in cfg.sizes()]
    return [n for n in counts if n > 0]


def _staging_note(comm: MPI.Comm, device: str, variants: list[Variant]) -> None:
    """Rank 0 says once when MPI algorithms stage -d cuda buffers through host memory."""
    # The selector (-a tuned) stages each MPI algorithm it picks, so it counts as MPI.
    backends = {
        "mpi" if v.algorithm.backend == "selector" else v.algorithm.backend for v in variants
    }
    if comm.Get_rank() == 0 and any(needs_staging(device, b) for b in backends):
        print(f"# {STAGING_NOTE}", flush=True)


def measure_collective(
    comm: MPI.Comm, cfg: BenchConfig, setting: Setting, topo: Topology, variants: list[Variant]
) -> Iterator[list[BenchRecord]]:
    """Yield, size by size, one record per variant (all interleaved within each size)."""
    nprocs = comm.Get_size()
    _staging_note(comm, cfg.device, variants)
    calls = device_calls(comm, BoundCalls(), variants, cfg.device)
    if os.environ.get(FAULT_ENV) == "raise" and comm.Get_rank() == nprocs - 1:
        raise RuntimeError("fault injected on the last rank (test hook)")
    clock = synchronise_clocks(comm) if cfg.per_rank else None
    check_roots = None
    if cfg.validate:
        check_roots = list(range(nprocs)) if cfg.root.rotate else [cfg.root.fixed]
    for n in _element_counts(cfg, setting):
        iterations, warmup = cfg.iterations_for(n * setting.etype.itemsize)
        inputs = prepare_inputs(
            comm,
            setting.spec,
            setting.etype,
            setting.op,
            setting.xp,
            n,
            cfg.root.fixed,
            cfg.in_place,
            checked=cfg.validate,
        )
        bounds = _bound_calls(comm, cfg, setting, n)
        timing = measure_osu(
            comm,
            calls,
            inputs,
            [cfg.root.root_at(i, nprocs) for i in range(warmup)],
            [cfg.root.root_at(i, nprocs) for i in range(iterations)],
            check_roots,
            per_rank=cfg.per_rank,
            unchecked=bounds,
        )
        wrongs = [None] * len(variants) if timing.wrong is None else timing.wrong
        wrongs += [None] * len(bounds)  # bounds compute nothing: never checked
        evidence = _rank_evidence(comm, cfg, topo, timing, clock)
        yield [
            bench_record(cfg, setting, topo, label, n, stats, iterations, wrong, ranks)
            for label, stats, wrong, ranks in zip(
                candidate_labels(cfg, variants), timing.stats, wrongs, evidence, strict=True
            )
        ]


def label_of(variant: Variant) -> tuple[str, str]:
    """A variant's name and backend, as its records and tables show them."""
    return variant.label, variant.algorithm.backend


def candidate_labels(cfg: BenchConfig, variants: list[Variant]) -> list[tuple[str, str]]:
    """(name, backend) of every table a collective run prints: the variants', then the
    bounds' with --bounds."""
    bounds = [(name, bounds_backend) for name in bound_labels(cfg.device)] if cfg.bounds else []
    return [label_of(v) for v in variants] + bounds


def _bound_calls(comm: MPI.Comm, cfg: BenchConfig, setting: Setting, n: int) -> list:
    """--bounds' calls at a size of ``n`` elements (none without --bounds)."""
    if not cfg.bounds:
        return []
    dtype, rank = setting.etype.dtype, comm.Get_rank()
    return bound_calls(cfg.device, setting.xp, n, dtype, setting.spec, rank)
