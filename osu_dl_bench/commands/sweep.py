"""``osu-dl-bench sweep``: the entry point of every measurement campaign. A plain sweep is
the jobs' orchestrator (jobs.orchestrate.run_sweep); ``--adaptive MAX`` measures every
candidate in the first ``--launches`` launches, then adds launches up to MAX, each only at
the points whose decision is still open (selection.adaptive), until none is."""

from __future__ import annotations

from dataclasses import replace

from osu_dl_bench.jobs.orchestrate import run_sweep
from osu_dl_bench.jobs.sweep_config import SweepConfig
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.selection.adaptive import OpenPoint, open_points
from osu_dl_bench.selection.rule import DEFAULT_RULE, DecisionRule
from osu_dl_bench.selection.tune import run_decisions


def focus_of(opened: list[OpenPoint]) -> list[tuple]:
    """The focus file's entries (FOCUS_KEY order) of the open points."""
    return [
        (point.decision.key.nprocs, point.decision.key.collective, point.decision.size, label)
        for point in opened
        for label in point.labels
    ]


def extra_launch(cfg: SweepConfig, launch: int) -> SweepConfig:
    """The sweep that measures launch ``launch`` of the focus: the run resumed with that
    many launches, each with the first launches' seconds per point (the budget is shared
    by the launches, so it grows with them)."""
    return replace(cfg, launches=launch, resume=True, budget=cfg.budget * launch / cfg.launches)


def sweep_rule(cfg: SweepConfig) -> DecisionRule:
    """The decision rule of --adaptive (--risk, --indifference; the default where unset)."""
    return cfg.rule if isinstance(cfg.rule, DecisionRule) else DEFAULT_RULE


def run_adaptive_sweep(cfg: SweepConfig) -> int:
    """The first launches over every candidate, then focused launches while points are
    open, up to cfg.adaptive launches in all; the exit code of the worst sweep."""
    code = run_sweep(cfg)
    if cfg.dry_run:  # the extra launches' focus comes from measurements none of it makes
        print(
            f"# adaptive: up to {cfg.adaptive - cfg.launches} more launches, each planned "
            f"from what the first {cfg.launches} measure",
            flush=True,
        )
        return code
    store = RunStore(cfg.output)
    for launch in range(cfg.launches + 1, cfg.adaptive + 1):
        if code not in (0, 1):  # 1: wrong results, stored and reported; anything else stops
            return code
        recorded = store.read_focus().get(launch)
        if recorded is not None:  # --resume: the launch's focus was decided and kept
            print(
                f"# adaptive: launch {launch} measures its recorded focus ({len(recorded)} "
                f"candidates); why: {store.path}/focus.json",
                flush=True,
            )
            code = max(code, run_sweep(extra_launch(cfg, launch)))
            continue
        decided, _ = run_decisions(cfg.output, cfg.dtype, cfg.op, sweep_rule(cfg))
        opened = open_points(decided.values())
        if not opened:
            print(f"# adaptive: every point decided after {launch - 1} launches", flush=True)
            return code
        focus = focus_of(opened)
        store.write_focus(launch, focus, [point.reason for point in opened])
        print(
            f"# adaptive: launch {launch} measures {len(opened)} open point(s) of "
            f"{len(decided)} ({len(focus)} candidates); why: {store.path}/focus.json",
            flush=True,
        )
        code = max(code, run_sweep(extra_launch(cfg, launch)))
    return code
