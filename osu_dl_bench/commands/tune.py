"""What the ``tune`` and ``select`` subcommands do (options: commands.tune_cli). They run as
one process, not an MPI job, so they print directly."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from collectives import SPECS
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.paths import check_writable_file, write_text_atomic
from osu_dl_bench.selection.exports import export_paths, write_exports
from osu_dl_bench.selection.pools import store_run_pool
from osu_dl_bench.selection.rule import rule_text
from osu_dl_bench.selection.selector import Query, Selector, default_context
from osu_dl_bench.selection.step_cost import step_cost_text, step_costs
from osu_dl_bench.selection.summary import table_summary
from osu_dl_bench.selection.table import TuningTable
from osu_dl_bench.selection.tune import EVIDENCE, run_decisions, table_and_pool
from osu_dl_bench.train.traffic import bucket_plan


@dataclass(frozen=True)
class TuneConfig:
    """The sweep to tune, the table file to write (its summary and exports beside it), the
    libraries to export for, the decision rule's risk and indifference zone, the dtype and
    op to tune on (None: the most common) and the model whose gradient traffic judges the
    table (None: none)."""

    run_dir: str
    table_path: Path
    exports: tuple[str, ...]
    risk: float
    indifference: float
    dtype: str | None
    op: str | None
    for_model: str | None

    def rule(self):
        """The decision rule of these options (selection.rule.DecisionRule)."""
        from osu_dl_bench.selection.rule import DecisionRule

        return DecisionRule(self.risk, self.indifference)


@dataclass(frozen=True)
class SelectConfig:
    """The calls to explain (communicator size, sizes, job shape, buffer kind, element type,
    op, one collective or None for every one in the table) and what decides them: the
    table, forced algorithms (None: the environment's) and the model's platform."""

    nprocs: int
    sizes: tuple[int, ...]
    nodes: int
    ppn: int | None
    device: str
    dtype: str
    op: str
    collective: str | None
    table: str | None
    force: Mapping[str, str] | None
    platform: str | None


def _traffic_text(cfg: TuneConfig, table: TuningTable) -> str:
    """tune --for: the table judged on the model's gradient traffic (the sweep's points
    decided as the table was)."""
    plan = bucket_plan(cfg.for_model)
    decisions, _ = run_decisions(cfg.run_dir, cfg.dtype, cfg.op, cfg.rule())
    measured = table.header.get("measured_with") or {}
    dtype, op = measured.get("dtype") or "float32", measured.get("op") or "sum"
    costs = step_costs(table, decisions, plan.bucket_bytes, dtype, op)
    return step_cost_text(plan.model, plan.bucket_bytes, costs)


def run_tune(cfg: TuneConfig) -> int:
    """Build the table, write it with its summary and exports, print the summary."""
    path = cfg.table_path
    base = path.with_suffix("")
    summary_path = base.with_name(base.name + ".summary.txt")
    # Every file the command writes is checked before the first is: a directory where an
    # export goes must not surface after the table and summary were written.
    check_writable_file("-o", str(path), make_parents=True)
    check_writable_file("-o", str(summary_path), make_parents=True)
    for export_path in export_paths(base, list(cfg.exports)):
        check_writable_file("--export", str(export_path), make_parents=True)
    table, warnings, pool = table_and_pool(cfg.run_dir, base.name, cfg.dtype, cfg.op, cfg.rule())
    table.write(path)
    summary = table_summary(table)
    if cfg.for_model:
        summary += "\n" + _traffic_text(cfg, table)
    write_text_atomic(summary_path, summary)
    print(summary, end="")
    written = [path, summary_path]
    for library, paths, notes in write_exports(table, base, list(cfg.exports)):
        written += paths
        warnings += [f"{library} export: {note}" for note in notes]
    for warning in warnings:
        print(f"# warning: {warning}")
    print("\n".join(f"# wrote {p}" for p in written))
    # An adaptive sweep of the same hosts, library and version screens with it.
    stored = store_run_pool(RunStore(cfg.run_dir).read_metadata(), pool)
    if stored is not None:
        print(f"# launch-variance pool stored in {stored}")
    return 0


def _collectives(cfg: SelectConfig, selector: Selector) -> list[str]:
    """--collective, or every collective the table holds (allreduce if none)."""
    if cfg.collective:
        return [cfg.collective]
    present = {e.key.collective for e in selector.table.entries} if selector.table else set()
    return [c for c in SPECS if c in present] or ["allreduce"]


def _model(platform: str | None):
    """The performance model as the selector's hook, when --platform names a platform."""
    if not platform:
        return None
    # Imported here: only --platform needs the model package (it sits above tuning).
    from osu_dl_bench.model.platform import load_platform
    from osu_dl_bench.model.selection import platform_model

    return platform_model(load_platform(platform))


def run_select(cfg: SelectConfig) -> int:
    """Print what the selector would pick for each collective and size, and why."""
    model = _model(cfg.platform)
    selector = Selector.from_file(cfg.table, cfg.force, model, force_source="--force")
    blocks = []
    if selector.table is not None:  # the rule the table was decided by, as tune recorded it
        blocks.append(f"# table {cfg.table}: {rule_text(selector.table.header.get(EVIDENCE))}")
    for collective in _collectives(cfg, selector):
        for size in cfg.sizes:
            query = Query(collective, cfg.nprocs, size, cfg.device, cfg.nodes, cfg.ppn)
            context = default_context(query, cfg.dtype, cfg.op)
            blocks.append(selector.explain(query, context))
    print("\n\n".join(blocks))
    return 0
