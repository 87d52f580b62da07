"""The bench command on every rank: set up, measure size by size, print and save on rank 0."""

from __future__ import annotations

from dataclasses import asdict, replace

from mpi4py import MPI

from collectives import SPECS, CallContext, Variant
from collectives.buffers import array_module
from collectives.device import gpu_sharing_reason, needs_staging, select_local_gpu
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.registry import BoundCalls
from collectives.units import format_size
from osu_dl_bench import __version__
from osu_dl_bench.diagnosis.linkmap import (
    judge_links,
    linkmap_header,
    linkmap_record,
    report_lines,
    write_linkmap,
)
from osu_dl_bench.errors import UsageError, ValidationFailure
from osu_dl_bench.measurement import report
from osu_dl_bench.measurement.bench_config import LINKMAP, BenchConfig, check_holds_an_element
from osu_dl_bench.measurement.bounds import BACKEND as BOUND_BACKEND
from osu_dl_bench.measurement.bounds import STAGING, bound_bytes, bound_labels
from osu_dl_bench.measurement.harness import (
    Setting,
    bench_record,
    candidate_labels,
    label_of,
    measure_collective,
)
from osu_dl_bench.measurement.kernel import delay_for, plan_variants
from osu_dl_bench.measurement.linkmap import LinkSettings, measure_links
from osu_dl_bench.measurement.memory import (
    Need,
    check_node_memory,
    collective_need,
    point_to_point_need,
)
from osu_dl_bench.measurement.p2p import check_pair, measure_point_to_point
from osu_dl_bench.measurement.records import BenchRecord, write_records
from osu_dl_bench.measurement.replay import measure_replay, prepare_buckets, steps_for
from osu_dl_bench.runtime.metadata import collect_metadata
from osu_dl_bench.runtime.rank_agreement import (
    agree_on_errors,
    agree_on_settings,
    file_fingerprint,
    on_rank0,
)
from osu_dl_bench.runtime.topology import discover_topology
from osu_dl_bench.selection.selector import Selector, parse_bench_algorithms
from osu_dl_bench.train.ddp_defaults import DEFAULT_BUCKET_CAP, DEFAULT_FIRST_BUCKET
from osu_dl_bench.train.traffic import BucketPlan, bucket_plan, check_model_name


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
    if cfg.buckets:
        _check_replay(cfg, etype.name)
    return Setting(spec, etype, op, array_module(cfg.device))


def _check_replay(cfg: BenchConfig, dtype: str) -> None:
    """What --buckets replays: float32 gradients (DDP's buckets are planned in float32
    bytes) in host memory, of a model it knows."""
    check_model_name(cfg.buckets)
    if dtype != "float32":
        raise UsageError(f"--buckets replays float32 gradients: expected -T float32, got {dtype}")
    if cfg.device == "cuda":
        raise UsageError("--buckets replays host buffers: expected -d cpu or cpu-registered")


def _memory_need(
    cfg: BenchConfig, setting: Setting, nprocs: int, variants: list[Variant] | None
) -> Need:
    """What each rank holds at -m's largest size (validated at every root with -c and -k
    rotate on a rooted collective; on cuda, the pinned mirrors of ``variants``' staged
    calls over every size)."""
    if setting.spec is None:
        return point_to_point_need(cfg.benchmark, cfg.max_size)
    itemsize = setting.etype.itemsize
    rotating = setting.spec.rooted and cfg.root.rotate
    roots = nprocs if cfg.validate and rotating else 1
    n = cfg.max_size // itemsize
    need = collective_need(
        setting.spec,
        n,
        nprocs,
        itemsize,
        cfg.device,
        cfg.validate,
        roots,
        staged_calls=_staged_calls(cfg, variants or []),
        counts=[count for count in (size // itemsize for size in cfg.sizes()) if count > 0],
    )
    if not cfg.bounds:
        return need
    extra, words = bound_bytes(cfg.max_size), "and the copy bounds' two buffers"
    if cfg.device == "cuda":  # they are device memory
        parts = f"{need.device_parts}, {words}"
        return replace(need, device_bytes=need.device_bytes + extra, device_parts=parts)
    return replace(need, rank_bytes=need.rank_bytes + extra, parts=f"{need.parts}, {words}")


def _staged_calls(cfg: BenchConfig, variants: list[Variant]) -> int:
    """The staged calls of a run (collectives.device), each keeping its receive mirrors
    across sizes: every candidate MPI stages (the selector's, -a tuned, stages the MPI
    algorithm it picks) and, with --bounds, the staging bound."""
    backends = [
        "mpi" if v.algorithm.backend == "selector" else v.algorithm.backend for v in variants
    ]
    bound = cfg.bounds and STAGING in bound_labels(cfg.device)
    return sum(needs_staging(cfg.device, backend) for backend in backends) + bound


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


def _streamed(labels: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The table printed row by row as each size is measured: the one candidate's, when
    there is one (the --bounds' tables, references beside it, follow it at the end);
    several candidates' tables are printed one after another at the end."""
    candidates = [label for label in labels if label[1] != BOUND_BACKEND]
    return candidates[0] if len(candidates) == 1 else None


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


def _bucket_plan(comm: MPI.Comm, model: str) -> BucketPlan:
    """Rank 0 builds the model's bucket plan (this imports torch: once, before any timing);
    every rank receives it."""
    plan = agree_on_errors(comm, lambda: bucket_plan(model) if comm.Get_rank() == 0 else None)
    return comm.bcast(plan, root=0)


def _allreduces(count: int) -> str:
    return f"{count} allreduce" + ("" if count == 1 else "s")


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.2f} MiB"


def _replay_header(cfg: BenchConfig, plan: BucketPlan, nprocs: int, steps: int, warmup: int):
    """The '#' lines above a replay's table: the traffic (once), the setting, the columns."""
    sizes = " ".join(str(b) for b in plan.bucket_bytes)
    return [
        f"# Gradient traffic replay (osu-dl-bench v{__version__}): one training step of "
        f"{plan.model} ({plan.parameters:,} parameters)",
        f"# DDP's buckets (first {_mib(DEFAULT_FIRST_BUCKET)}, cap {_mib(DEFAULT_BUCKET_CAP)}, "
        f"reverse parameter order): {_allreduces(len(plan.bucket_bytes))}, "
        f"{_mib(plan.total_bytes)} per step",
        f"# Buckets (bytes, in order): {sizes}",
        f"# Datatype: {element_type(cfg.dtype).mpi_name}.  Processes: {nprocs}  Op: {cfg.op}"
        f"  Steps: {steps} (warm-up {warmup})" + ("  In-place: yes" if cfg.in_place else ""),
        "# Avg/Min/Max: across ranks of each rank's mean step (OSU); P50/P99: of each "
        "step's slowest rank",
        f"{'# Algorithm':<{_LABEL_WIDTH}}"
        + "".join(f"{h:>{_FIELD_WIDTH}}" for h in _replay_headings(cfg)),
    ]


_LABEL_WIDTH, _FIELD_WIDTH = 24, 16
_REPLAY_FIELDS = ("avg_us", "min_us", "max_us", "p50_us", "p99_us", "algbw_gbs", "busbw_gbs")
_REPLAY_HEADINGS = ("Avg Step(us)", "Min Step(us)", "Max Step(us)", "P50 Step(us)")
_REPLAY_HEADINGS += ("P99 Step(us)", "algbw(GB/s)", "busbw(GB/s)")


def _replay_headings(cfg: BenchConfig) -> tuple[str, ...]:
    return _REPLAY_HEADINGS + (("Validation",) if cfg.validate else ())


def _replay_row(cfg: BenchConfig, record: BenchRecord) -> str:
    values = [f"{getattr(record, name):.2f}" for name in _REPLAY_FIELDS]
    if cfg.validate:
        values.append((record.validation or "").capitalize())
    return f"{record.algorithm:<{_LABEL_WIDTH}}" + "".join(f"{v:>{_FIELD_WIDTH}}" for v in values)


def _replay_columns(plan: BucketPlan) -> dict[str, object]:
    """The replay's own columns in -o's records, the same on every row."""
    sizes = " ".join(str(b) for b in plan.bucket_bytes)
    return {"model": plan.model, "bucket_count": len(plan.bucket_bytes), "bucket_bytes": sizes}


def _replay(
    comm: MPI.Comm,
    cfg: BenchConfig,
    setting: Setting,
    topo,
    variants: list[Variant],
    plan: BucketPlan,
    metadata: dict,
) -> int:
    """bench --buckets: time every variant's steps, print one row per variant, save."""
    steps, warmup = steps_for(cfg)
    _print(comm, *_replay_header(cfg, plan, comm.Get_size(), steps, warmup))
    buckets = prepare_buckets(
        comm,
        *(setting.spec, setting.etype, setting.op, setting.xp),
        plan.bucket_counts,
        cfg.in_place,
        checked=cfg.validate,
    )
    calls = BoundCalls().calls(comm, variants)
    timing = measure_replay(comm, calls, buckets, steps, warmup, cfg.validate)
    count = sum(plan.bucket_counts)
    wrongs = timing.wrong or [None] * len(variants)
    records = [
        bench_record(cfg, setting, topo, label_of(variant), count, stats, steps, wrong)
        for variant, stats, wrong in zip(variants, timing.stats, wrongs, strict=True)
    ]
    _print(comm, *(_replay_row(cfg, r) for r in records))
    if cfg.output:
        _save(comm, cfg.output, records, {**metadata, **_replay_columns(plan)})
    failure = _validation_error(records)
    if cfg.per_rank:
        for record in records:
            _print(comm, "", *report.per_rank_lines(record))
    if failure:
        raise failure
    return 0


def _linkmap(comm: MPI.Comm, cfg: BenchConfig) -> int:
    """bench linkmap: every pair of nodes measured, the matrices and what stands out
    printed by rank 0, the record written with -o."""
    topo = discover_topology(comm, cfg.emulated_ppn)
    check_node_memory(comm, [point_to_point_need(LINKMAP, cfg.max_size)])
    metadata = collect_metadata(topo, cfg.device).as_dict()
    settings = LinkSettings(cfg.max_size, cfg.iterations, cfg.warmup, cfg.repetitions)
    samples = measure_links(comm, settings)
    linkmap = judge_links(samples) if comm.Get_rank() == 0 else None
    if linkmap is not None:
        _print(comm, *linkmap_header(linkmap.samples, topo.nprocs), *report_lines(linkmap))
    if cfg.output:
        on_rank0(comm, lambda: write_linkmap(cfg.output, linkmap_record(linkmap, metadata)))
    return 0


def run_bench(comm: MPI.Comm, cfg: BenchConfig) -> int:
    """Run one bench configuration; returns the exit code (raises on bad input)."""
    nprocs = comm.Get_size()
    agree_on_settings(comm, agree_on_errors(comm, lambda: _settings_every_rank_shares(cfg)))
    if cfg.benchmark == LINKMAP:
        return _linkmap(comm, cfg)
    setting = agree_on_errors(comm, lambda: _setting(cfg, nprocs))
    agree_on_errors(comm, lambda: delay_for(comm))  # the test hook, checked once
    if cfg.device == "cuda":
        # One GPU per node-local rank before any buffer exists (latency/bw/bibw bind no
        # variant, so nothing else would choose it: every rank would use GPU 0).
        select_local_gpu(comm)
    traffic = _bucket_plan(comm, cfg.buckets) if cfg.buckets else None
    topo = discover_topology(comm, cfg.emulated_ppn)
    metadata = collect_metadata(topo, cfg.device).as_dict()
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
    refused = gpu_sharing_reason() if cfg.device == "cuda" else None
    if refused and any(v.algorithm.backend == "nccl" for v, _ in skipped):
        _print(comm, f"# nccl: {refused}")  # the job's one reason, every rank agreed
    if variants == []:
        raise UsageError(f"no algorithm named in -a {cfg.algorithms} can run here")
    # Before any buffer: what the run holds depends on which candidates stage.
    check_node_memory(comm, [_memory_need(cfg, setting, nprocs, variants)])
    if traffic is not None:
        return _replay(comm, cfg, setting, topo, variants, traffic, metadata)
    if variants is None:
        measured = measure_point_to_point(comm, cfg, setting, topo)
        labels = [("native", "mpi")]
    else:
        measured = measure_collective(comm, cfg, setting, topo, variants)
        labels = candidate_labels(cfg, variants)
    streamed = _streamed(labels)
    if streamed:
        _print(comm, *report.header_lines(cfg, *streamed, nprocs))
    records: list[BenchRecord] = []
    failure = None
    for size_records in measured:
        records.extend(size_records)
        if streamed:
            _print(comm, report.row(cfg, size_records[0]))
        if cfg.output:
            _save(comm, cfg.output, records, metadata)  # after every size: nothing is lost
        failure = _validation_error(size_records)
        if failure:
            break
    for label, backend in (lab for lab in labels if lab != streamed):
        _print(
            comm,
            "",
            *report.header_lines(cfg, label, backend, nprocs),
            *(report.row(cfg, r) for r in records if (r.algorithm, r.backend) == (label, backend)),
        )
    if cfg.per_rank:
        for record in records:
            _print(comm, "", *report.per_rank_lines(record))
    if failure:
        raise failure
    return 0
