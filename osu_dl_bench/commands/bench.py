"""The bench command on every rank: set up, measure size by size, print and save on rank 0."""

from __future__ import annotations

from dataclasses import asdict

from mpi4py import MPI

from collectives import SPECS, CallContext, Variant
from collectives.buffers import array_module
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.units import format_size
from osu_dl_bench.errors import UsageError, ValidationFailure
from osu_dl_bench.measurement import report
from osu_dl_bench.measurement.harness import Setting, measure_collective
from osu_dl_bench.measurement.kernel import plan_variants
from osu_dl_bench.measurement.options import BenchConfig, check_holds_an_element
from osu_dl_bench.measurement.p2p import check_pair, measure_point_to_point
from osu_dl_bench.measurement.records import BenchRecord, write_records
from osu_dl_bench.runtime import (
    agree_on_errors,
    agree_on_settings,
    collect_metadata,
    discover_topology,
    file_fingerprint,
)
from osu_dl_bench.selection.selector import Selector, parse_bench_algorithms


def _setting(cfg: BenchConfig, nprocs: int) -> Setting:
    """Resolve names into objects, checking everything that depends on the job size."""
    etype = element_type(cfg.dtype)
    spec = SPECS.get(cfg.benchmark)
    if spec is not None and spec.name != "barrier":
        sizes = f"{format_size(cfg.min_size)}:{format_size(cfg.max_size)}"
        check_holds_an_element(sizes, cfg.max_size, etype.dtype.itemsize)
    op = None
    if spec is not None and spec.reduces:
        op = reduce_op(cfg.op)
        op.check_dtype(etype)
    if spec is not None and spec.rooted and not cfg.root.rotate and cfg.root.fixed >= nprocs:
        raise UsageError(f"-k {cfg.root}: root must be below the number of processes ({nprocs})")
    if (
        spec is not None
        and spec.rooted
        and cfg.in_place
        and cfg.root.rotate
        and spec.name != "bcast"
    ):
        # In place is a root-only property of these calls: the buffers would have to
        # change shape with every root.
        raise UsageError(f"-l with -k rotate is not supported for {spec.name}: use -k fixed:N")
    if spec is None:
        check_pair(nprocs, cfg.benchmark)
    return Setting(spec, etype, op, array_module(cfg.device))


def _settings_every_rank_shares(cfg: BenchConfig) -> dict[str, object]:
    """The options (and the table's bytes) that decide which calls a rank makes (-o is
    rank 0's alone)."""
    shared = asdict(cfg)
    shared.pop("output")
    if cfg.table:
        shared["table"] = file_fingerprint(cfg.table, "--table")
    return shared


def _save(comm: MPI.Comm, path: str, records: list[BenchRecord], metadata: dict) -> None:
    """Rank 0 rewrites -o; every rank learns whether that worked, so a full disk stops
    the whole job with one message instead of a traceback and an abort."""
    error = None
    if comm.Get_rank() == 0:
        try:
            write_records(path, records, metadata)
        except OSError as exc:
            error = (
                f"-o {path}: cannot write ({exc.strerror or exc}); the file keeps the "
                "sizes measured before this one"
            )
    error = comm.bcast(error, root=0)
    if error:
        raise UsageError(error, agreed=True)


def _variants(cfg: BenchConfig, ctx: CallContext) -> list[Variant]:
    """-a's variants; 'tuned' is the runtime selector over --table, bound like any other."""
    return parse_bench_algorithms(
        cfg.benchmark,
        cfg.algorithms,
        lambda: Selector.from_file(cfg.table).variant(cfg.benchmark, ctx),
    )


def _print(comm: MPI.Comm, *lines: str) -> None:
    if comm.Get_rank() == 0:
        for line in lines:
            print(line, flush=True)


def _validation_error(records: list[BenchRecord]) -> ValidationFailure | None:
    for rec in records:
        if rec.validation == "fail":
            return ValidationFailure(
                f"DATA VALIDATION ERROR: {rec.collective} ({rec.algorithm}) had "
                f"{rec.wrong_elements} wrong elements on message size {rec.size_bytes}"
            )
    return None


def run_bench(comm: MPI.Comm, cfg: BenchConfig) -> int:
    """Run one bench configuration; returns the exit code (raises on bad input)."""
    nprocs = comm.Get_size()
    agree_on_settings(comm, agree_on_errors(comm, lambda: _settings_every_rank_shares(cfg)))
    setting = agree_on_errors(comm, lambda: _setting(cfg, nprocs))
    topo = discover_topology(comm, cfg.ranks_per_node)
    metadata = collect_metadata(topo).as_dict()
    if setting.spec is None:
        variants, skipped = None, []
    else:
        ctx = CallContext(nprocs, setting.etype, setting.op, cfg.device, topo.nodes, topo.ppn)
        # -a tuned reads --table on every rank: one rank that cannot read it fails all.
        plan = plan_variants(agree_on_errors(comm, lambda: _variants(cfg, ctx)), ctx)
        agree_on_settings(comm, {"-a": [v.label for v in plan.eligible]})
        variants, skipped = plan.eligible, plan.skipped
    for variant, reason in skipped:
        _print(comm, f"# {variant.label}: skipped: {reason}")
    if variants == []:
        raise UsageError(f"no algorithm named in -a {cfg.algorithms} can run here")
    if variants is None:
        measured = measure_point_to_point(comm, cfg, setting, topo)
        labels = [("native", "mpi")]
    else:
        measured = measure_collective(comm, cfg, setting, topo, variants)
        labels = [(v.label, v.algorithm.backend) for v in variants]
    stream = len(labels) == 1
    if stream:
        _print(comm, *report.header_lines(cfg, *labels[0], nprocs))
    records: list[BenchRecord] = []
    failure = None
    for size_records in measured:
        records.extend(size_records)
        if stream:
            _print(comm, report.row(cfg, size_records[0]))
        if cfg.output:
            _save(comm, cfg.output, records, metadata)  # after every size: nothing is lost
        failure = _validation_error(size_records)
        if failure:
            break
    if not stream:
        for label, backend in labels:
            _print(
                comm,
                "",
                *report.header_lines(cfg, label, backend, nprocs),
                *(report.row(cfg, r) for r in records if r.algorithm == label),
            )
    if failure:
        raise failure
    return 0
