"""What the ``tune`` and ``select`` subcommands do (options: commands.tune_options). They run as
one process, not an MPI job, so they print directly."""

from __future__ import annotations

import argparse
from pathlib import Path

from collectives import SPECS
from collectives.buffers import DEVICES
from collectives.shape import JobShape
from collectives.units import parse_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.paths import check_writable_file, write_text_atomic
from osu_dl_bench.selection.exports import parse_exports, write_exports
from osu_dl_bench.selection.names import TABLE_DIR
from osu_dl_bench.selection.selector import Query, Selector, default_context, parse_force
from osu_dl_bench.selection.step_cost import step_cost_text, step_costs
from osu_dl_bench.selection.summary import table_summary
from osu_dl_bench.selection.table import TuningTable
from osu_dl_bench.selection.tune import build_table, run_decisions
from osu_dl_bench.train.traffic import bucket_plan, check_model_name


def _table_path(args: argparse.Namespace) -> Path:
    path = Path(args.output or Path(TABLE_DIR) / f"{Path(args.run_dir).resolve().name}.json")
    if path.suffix != ".json":
        raise UsageError(f"-o {path}: expected a file ending in .json")
    check_writable_file("-o", str(path), make_parents=True)
    return path


def _traffic_text(args: argparse.Namespace, table: TuningTable) -> str:
    """tune --for: the table judged on the model's gradient traffic (the sweep's points
    decided as the table was)."""
    plan = bucket_plan(args.for_model)
    decisions, _ = run_decisions(args.run_dir, args.dtype, args.op, args.risk)
    measured = table.header.get("measured_with") or {}
    dtype, op = measured.get("dtype") or "float32", measured.get("op") or "sum"
    costs = step_costs(table, decisions, plan.bucket_bytes, dtype, op)
    return step_cost_text(plan.model, plan.bucket_bytes, costs)


def run_tune(args: argparse.Namespace) -> int:
    """Build the table, write it with its summary and exports, print the summary."""
    path = _table_path(args)
    libraries = parse_exports(args.export)
    if args.for_model:
        check_model_name(args.for_model)  # before the work, not after it
    base = path.with_suffix("")
    table, warnings = build_table(args.run_dir, base.name, args.dtype, args.op, args.risk)
    table.write(path)
    summary = table_summary(table)
    if args.for_model:
        summary += "\n" + _traffic_text(args, table)
    summary_path = base.with_name(base.name + ".summary.txt")
    write_text_atomic(summary_path, summary)
    print(summary, end="")
    written = [path, summary_path]
    for library, paths, notes in write_exports(table, base, libraries):
        written += paths
        warnings += [f"{library} export: {note}" for note in notes]
    for warning in warnings:
        print(f"# warning: {warning}")
    print("\n".join(f"# wrote {p}" for p in written))
    return 0


def _collectives(args: argparse.Namespace, selector: Selector) -> list[str]:
    if args.collective:
        if args.collective not in SPECS:
            raise UsageError(f"--collective {args.collective}: expected one of {', '.join(SPECS)}")
        return [args.collective]
    present = {e.key.collective for e in selector.table.entries} if selector.table else set()
    return [c for c in SPECS if c in present] or ["allreduce"]


def _model(args: argparse.Namespace):
    """The performance model as the selector's hook, when --platform names a platform."""
    if not getattr(args, "platform", None):
        return None
    # Imported here: only --platform needs the model package (it sits above tuning).
    from osu_dl_bench.model.platform import load_platform
    from osu_dl_bench.model.selection import platform_model

    return platform_model(load_platform(args.platform))


def run_select(args: argparse.Namespace) -> int:
    """Print what the selector would pick for each collective and size, and why."""
    layout = JobShape(args.np, args.nodes, args.ppn).problem()
    if layout:
        ppn = "" if args.ppn is None else f" --ppn {args.ppn}"
        raise UsageError(f"--np {args.np} --nodes {args.nodes}{ppn}: {layout}")
    if args.device not in DEVICES:
        raise UsageError(f"-d {args.device}: expected one of {', '.join(DEVICES)}")
    force = None if args.force is None else parse_force(args.force, "--force")
    selector = Selector.from_file(args.table, force, _model(args), force_source="--force")
    sizes = [parse_size(s) for s in args.size.split(",") if s.strip()]
    if not sizes:
        raise UsageError(f"--size {args.size!r}: expected at least one size, e.g. 8,64K,1M")
    blocks = []
    for collective in _collectives(args, selector):
        for size in sizes:
            query = Query(collective, args.np, size, args.device, args.nodes, args.ppn)
            context = default_context(query, args.dtype, args.op)
            blocks.append(selector.explain(query, context))
    print("\n\n".join(blocks))
    return 0
