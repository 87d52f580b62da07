"""OSU-format text tables (rank 0 prints them; this module only formats).

Layout from OSU's c/util/osu_util.c: the size left-justified in 10 characters, every
other field right-justified in 20 with 2 decimals, the iteration count in 12.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collectives.dtypes import element_type
from collectives.specs import SPECS
from osu_dl_bench import __version__
from osu_dl_bench.measurement import bounds
from osu_dl_bench.measurement.bench_config import BenchConfig
from osu_dl_bench.measurement.records import BenchRecord

SIZE_WIDTH = 10
FIELD_WIDTH = 20
ITER_WIDTH = 12
TITLES = {
    **{name: spec.title for name, spec in SPECS.items()},
    "latency": "Latency",
    "bw": "Bandwidth",
    "bibw": "Bi-Directional Bandwidth",
}


@dataclass(frozen=True)
class Column:
    """One column: its heading, width and how to format a record's value."""

    heading: str
    width: int
    value: Callable[[BenchRecord], str]


def _num(field: str) -> Callable[[BenchRecord], str]:
    return lambda r: f"{getattr(r, field):.2f}"


def columns(cfg: BenchConfig) -> list[Column]:
    """The columns a configuration prints, in OSU's order, then ours."""
    if cfg.benchmark == "latency":
        return [Column("Latency (us)", FIELD_WIDTH, _num("avg_us"))]
    if cfg.benchmark in ("bw", "bibw"):
        return [Column("Bandwidth (MB/s)", FIELD_WIDTH, _num("bandwidth_mbs"))]
    cols = [Column("Avg Latency(us)", FIELD_WIDTH, _num("avg_us"))]
    if cfg.full:
        cols += [
            Column("Min Latency(us)", FIELD_WIDTH, _num("min_us")),
            Column("Max Latency(us)", FIELD_WIDTH, _num("max_us")),
            Column("Iterations", ITER_WIDTH, lambda r: str(r.iterations)),
        ]
    if cfg.percentiles:
        cols += [
            Column("P50 Tail Lat(us)", FIELD_WIDTH, _num("p50_us")),
            Column("P99 Tail Lat(us)", FIELD_WIDTH, _num("p99_us")),
        ]
    if cfg.benchmark != "barrier":
        cols += [
            Column("algbw(GB/s)", FIELD_WIDTH, _num("algbw_gbs")),
            Column("busbw(GB/s)", FIELD_WIDTH, _num("busbw_gbs")),
        ]
    return cols


def _validation_column() -> Column:
    return Column("Validation", ITER_WIDTH, lambda r: (r.validation or "").capitalize())


def header_lines(cfg: BenchConfig, algorithm: str, backend: str, nprocs: int) -> list[str]:
    """The '#' lines above a table: OSU's title and datatype, then ours, then the columns."""
    etype = element_type(cfg.dtype)
    spec = SPECS.get(cfg.benchmark)  # None for the point-to-point tests
    lines = [
        f"# OSU MPI {TITLES[cfg.benchmark]} Test (osu-dl-bench v{__version__})",
        f"# Datatype: {etype.mpi_name}.",
        f"# Algorithm: {algorithm}  Backend: {backend}  Processes: {nprocs}"
        + (f"  Op: {cfg.op}" if spec is not None and spec.reduces else "")
        + (f"  Root: {cfg.root}" if spec is not None and spec.rooted else "")
        + ("  In-place: yes" if cfg.in_place else ""),
    ]
    if backend == bounds.BACKEND:
        lines.append(f"# Bound: {bounds.description(algorithm, cfg.device)} (not checked)")
    cols = columns(cfg) + ([_validation_column()] if cfg.validate else [])
    size_heading = "# Size" if cfg.benchmark != "barrier" else "#"
    lines.append(f"{size_heading:<{SIZE_WIDTH}}" + "".join(f"{c.heading:>{c.width}}" for c in cols))
    return lines


def row(cfg: BenchConfig, record: BenchRecord) -> str:
    """One table row."""
    cols = columns(cfg) + ([_validation_column()] if cfg.validate else [])
    size = "" if cfg.benchmark == "barrier" else str(record.size_bytes)
    return f"{size:<{SIZE_WIDTH}}" + "".join(f"{c.value(record):>{c.width}}" for c in cols)


RANK_FIELDS = ("lag_us", "wait_us", "finish_us", "p50_us", "p99_us")
RANK_HEADINGS = ("lag(us)", "wait(us)", "finish(us)", "P50(us)", "P99(us)")


def per_rank_lines(record: BenchRecord) -> list[str]:
    """The per-rank and per-node block of one record (bench --per-rank): each rank's
    median lag behind the earliest arrival, wait for the last, finish after the
    earliest, its own P50/P99 and how often it arrived last; per node, its worst rank's."""
    ranks = record.per_rank
    if not ranks:
        return []
    head = "".join(f"{h:>12}" for h in RANK_HEADINGS)
    lines = [
        f"# per rank: {record.collective} {record.algorithm}, {record.size_bytes} B "
        f"(clocks aligned to rank 0's within {record.clock_residual_us:.1f} us)",
        f"# {'rank':>4}  {'node':<16}{head}{'last':>7}",
    ]
    for r in ranks:
        values = "".join(f"{r[f]:>12.2f}" for f in RANK_FIELDS)
        lines.append(f"  {r['rank']:>4}  {r['node'][:16]:<16}{values}{r['last_share']:>7.0%}")
    nodes: dict[str, list[dict]] = {}
    for r in ranks:
        nodes.setdefault(r["node"], []).append(r)
    if len(nodes) > 1:
        lines.append(f"# per node (its worst rank): {'node':<16}{'ranks':>8}{head}")
        for node, members in nodes.items():
            worst = "".join(
                f"{(min if f == 'wait_us' else max)(m[f] for m in members):>12.2f}"
                for f in RANK_FIELDS
            )
            lines.append(f"  {'':>26}{node[:16]:<16}{len(members):>8}{worst}")
    return lines
