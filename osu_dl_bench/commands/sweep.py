"""``osu-dl-bench sweep``: the entry point of every measurement campaign. A plain sweep is
the jobs' orchestrator (jobs.orchestrate.run_sweep); ``--adaptive MAX`` measures every
candidate in one screening launch (``--launches`` of them), judged with a stored launch
pool (selection.pools) or, without one, with a second launch over every candidate; then
adds launches, each only at the points whose decision is still open (selection.adaptive),
until none is or a point has had MAX launches."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from osu_dl_bench.jobs.orchestrate import run_sweep
from osu_dl_bench.jobs.sweep_config import SweepConfig
from osu_dl_bench.measurement.store import POINT_KEY, RunStore
from osu_dl_bench.selection.adaptive import AdaptiveDecisions, OpenPoint
from osu_dl_bench.selection.evidence import LaunchPool
from osu_dl_bench.selection.pools import PoolIdentity, read_pool, write_pool
from osu_dl_bench.selection.rule import DEFAULT_RULE, DecisionRule
from osu_dl_bench.selection.tune import decision_rows


def focus_of(opened: list[OpenPoint]) -> list[tuple]:
    """The focus file's entries (FOCUS_KEY order) of the open points."""
    return [
        (point.decision.key.nprocs, point.decision.key.collective, point.decision.size, label)
        for point in opened
        for label in point.labels
    ]


def launch_config(cfg: SweepConfig, launch: int) -> SweepConfig:
    """The sweep whose last launch is ``launch`` (the earlier ones are stored: resumed past
    the screening launches); every launch gets the seconds per point one launch of a
    default sweep at --budget gets (sweep_cli), a focused one spending each measured
    candidate's share of them."""
    return replace(cfg, last_launch=launch, resume=cfg.resume or launch > cfg.launches)


@dataclass
class Steps:
    """The adaptive sweep's account: one line per step (points, candidates, wall time)."""

    cfg: SweepConfig
    code: int = 0
    started: float = field(default_factory=time.monotonic)

    def run(self, launch: int, what: str) -> bool:
        """Measure launch ``launch`` and say what it measured; whether to go on (exit code
        1, wrong results stored and reported, goes on; anything else stops)."""
        began = time.monotonic()
        self.code = max(self.code, run_sweep(launch_config(self.cfg, launch)))
        say(f"launch {launch}: {what}, {time.monotonic() - began:.0f} s")
        return self.code in (0, 1)


def say(text: str) -> None:
    """One line of the adaptive sweep's account."""
    print(f"# adaptive: {text}", flush=True)


def sweep_rule(cfg: SweepConfig) -> DecisionRule:
    """The decision rule of --adaptive (--risk, --indifference; the default where unset)."""
    return cfg.rule if isinstance(cfg.rule, DecisionRule) else DEFAULT_RULE


def run_adaptive_sweep(cfg: SweepConfig) -> int:
    """The screening launch(es) over every candidate, then focused launches while points
    are open, up to cfg.adaptive launches at any point; the exit code of the worst."""
    if cfg.dry_run:  # the focused launches come from measurements none of it makes
        code = run_sweep(launch_config(cfg, cfg.launches))
        say(
            f"{cfg.launches} launch(es) over every candidate, then up to "
            f"{cfg.adaptive - cfg.launches} more, each planned from what the first measure"
        )
        return code
    steps = Steps(cfg)
    if not steps.run(cfg.launches, "every candidate at every point (screening)"):
        return steps.code
    store = RunStore(cfg.output)
    identity = PoolIdentity.of_run(store.read_metadata())
    pool, why = read_pool(identity) if identity else (None, "the run names no host set")
    first = cfg.launches
    if first < 2 and _second_launch_everywhere(cfg, store):
        # --resume: the run's first decision rested on its own two launches; so again.
        pool, why = None, "this run's launch 2 measured every candidate (--resume)"
    if pool is None and first < 2:
        say(
            f"{why}: one launch holds no launch-to-launch variance to judge by, so launch 2 "
            "measures every candidate at every point"
        )
        first = 2
        if not steps.run(first, "every candidate at every point"):
            return steps.code
    elif pool is not None and first < 2:
        say(f"launch 1 judged with {why} (the same host set, library and version)")
    decided: AdaptiveDecisions | None = None
    for launch in range(first + 1, cfg.adaptive + 1):
        recorded = store.read_focus().get(launch)
        if recorded is not None:  # --resume: the launch's focus was decided and kept
            what = f"its recorded focus ({len(recorded)} candidates; {store.path}/focus.json)"
            decided = None  # measured since: decided again from the run when needed
            if not steps.run(launch, what):
                return steps.code
            continue
        if decided is None:
            decided = _first_decisions(cfg, sweep_rule(cfg), pool, identity)
        opened = decided.open_points()
        if not opened:
            say(f"every point settled after {launch - 1} launches")
            break
        focus = focus_of(opened)
        store.write_focus(launch, focus, [point.reason for point in opened])
        what = (
            f"{len(opened)} open point(s) of {len(decided.decisions)}, {len(focus)} "
            f"candidates (why: {store.path}/focus.json)"
        )
        if not steps.run(launch, what):
            return steps.code
        rows, warn = decision_rows(cfg.output, cfg.measure.dtype, cfg.measure.op)
        began = time.monotonic()
        count = decided.redecide(rows, {entry[:3] for entry in focus}, warn)
        say(f"{count} point(s) decided again, {time.monotonic() - began:.0f} s")
    else:
        if decided is not None and (left := decided.open_points()):
            say(f"{len(left)} point(s) still open after {cfg.adaptive} launches (--adaptive)")
    say(f"{time.monotonic() - steps.started:.0f} s in all")
    return steps.code


def _second_launch_everywhere(cfg: SweepConfig, store: RunStore) -> bool:
    """Whether a resumed run already measured launch 2 over every candidate (no stored
    pool then: the run's own first decision rests on its two launches)."""
    if not cfg.resume or 2 in store.read_focus():
        return False
    return any(key[POINT_KEY.index("launch")] == 2 for key in store.finished_points())


def _first_decisions(
    cfg: SweepConfig,
    rule: DecisionRule,
    pool: LaunchPool | None,
    identity: PoolIdentity | None,
) -> AdaptiveDecisions:
    """Every point decided (with ``pool``, or the run's own, which is then stored)."""
    rows, warn = decision_rows(cfg.output, cfg.measure.dtype, cfg.measure.op)
    began = time.monotonic()
    decided = AdaptiveDecisions.first(rows, warn, rule, pool)
    say(f"{len(decided.decisions)} point(s) decided, {time.monotonic() - began:.0f} s")
    if pool is None and identity is not None and decided.pool.components:
        say(f"launch-variance pool stored in {write_pool(identity, decided.pool)}")
    return decided
