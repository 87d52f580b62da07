"""Simulated A/B sweeps that judge the decision rule against the truth they were drawn from.

Run from the repository root (it builds run directories with the tests' helpers):

    PYTHONPATH=$PWD python scripts/rule_simulation.py            # the defaults' grid
    PYTHONPATH=$PWD python scripts/rule_simulation.py --pairs 4  # quicker

Each simulated sweep measures bcast at p = 2, 3 and 4, 4 KiB to 4 MiB every 4x, native
and six candidates whose true ratios to native follow the shapes this machine's sweeps
show (binomial ahead when small, the chain and scatter variants ahead when large, two
chain segment sizes within 5% of each other, cma 4% ahead of native at every size, and
shm:chunk=1M exactly as fast as native: a null-like candidate), with crossovers that move
with p, over 3 launches of 10 rounds. The noise: a machine state shared by a launch's
rounds (machine_states), each candidate's own round jitter (4%), a launch effect shared
by a size band on native (its drift: every ratio moves with it) and on each candidate
(sd 0.05 each), and one per point (sd 0.02). Sweeps A and B of a pair differ by a
between-period shift per process count and band: sd 0.06 on native (every ratio moves),
0.03 per candidate. Decisions come from the real code (selection.tune.estimate_run and
decide_estimates, as decide_run does, through a run directory; the old rule from
tests/support/old_rule.py) and are judged on:

- stability: A's choice is in B's all-candidate tie set (DecisionRule.equivalent), and B's
  in A's;
- captured speedup: over the points where the true best is at least 1.1x faster than
  native, the log speedup the choice captures over the true best's (the truth: the curves
  drawn from, without the period's shift);
- true mean regret: the choice's true time over the true best's, less 1, on average;
- null wins: the share of points where the null-like candidate is chosen;
- >5% slower: the share of points whose choice is truly more than 5% slower than native.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from osu_dl_bench.selection.rule import SLOWER_MARGIN, DecisionRule
from osu_dl_bench.selection.tune import (
    _read_run,
    decide_estimates,
    estimate_run,
    select_rows,
    usable_rows,
    without_library_candidates,
)
from tests.support import old_rule
from tests.support.tuning import launch_rows, machine_states, scaled, write_run

COLLECTIVE = "bcast"
COUNTS = (2, 3, 4)
SIZES = tuple(4096 << (2 * k) for k in range(6))  # 4 KiB .. 4 MiB
LAUNCHES, ROUNDS = 3, 10
NULL = "shm:chunk=1M"
CAPTURE_MIN = 1.1


def _step(x: float, at: float, low: float, high: float, width: float = 3.0) -> float:
    """A log-ratio moving from ``low`` (small sizes) to ``high`` around log2 size ``at``."""
    return low + (high - low) / (1 + math.exp(-(x - at) / width * 4))


def true_ratio(label: str, nprocs: int, size: int) -> float:
    """The candidate's true time over native's at p and size."""
    x = math.log2(size) - 0.5 * math.log2(nprocs)  # crossovers move with p
    shapes = {
        "binomial": lambda: _step(x, 16, -0.12, 0.25),
        "chain:seg=1M": lambda: _step(x, 19, 0.45, -0.45),
        "chain:seg=256K": lambda: _step(x, 18.5, 0.42, -0.43),
        "scatter_ring_allgather": lambda: _step(x, 17, 0.20, -0.28),
        "cma": lambda: math.log(0.96),
        NULL: lambda: 0.0,
    }
    return math.exp(shapes[label]())


CANDIDATES = (
    "binomial",
    "chain:seg=1M",
    "chain:seg=256K",
    "scatter_ring_allgather",
    "cma",
    NULL,
)


def _band(size: int) -> int:
    return 0 if size < 64 << 10 else 1 if size < 1 << 20 else 2


def _period(rng: np.random.Generator) -> dict:
    """One sweep's between-period shifts: per (p, band) on native, per (p, band, label)."""
    shifts = {}
    for nprocs in COUNTS:
        for band in range(3):
            shifts[(nprocs, band, "native")] = rng.normal(0, 0.06)
            for label in CANDIDATES:
                shifts[(nprocs, band, label)] = rng.normal(0, 0.03)
    return shifts


def sweep_rows(seed: int) -> list:
    """One simulated sweep's rows."""
    rng = np.random.default_rng(seed)
    period = _period(rng)
    # Launch effects shared by a band: native's own drift (every ratio moves with it) and
    # each candidate's.
    drift = {key: rng.normal(0, 0.05) for key in _launch_keys(("native", *CANDIDATES))}
    rows = []
    for nprocs in COUNTS:
        for size in SIZES:
            band = _band(size)
            states = machine_states(
                LAUNCHES, ROUNDS, 20.0 + size / 2000.0, int(rng.integers(1 << 30))
            )
            native = [
                math.exp(period[(nprocs, band, "native")] + drift[(nprocs, band, "native", k)])
                for k in range(LAUNCHES)
            ]
            rows += launch_rows(
                COLLECTIVE,
                "native",
                size,
                scaled(states, native, 0.04, int(rng.integers(1 << 30))),
                nprocs=nprocs,
            )
            for label in CANDIDATES:
                factors = [
                    true_ratio(label, nprocs, size)
                    * math.exp(
                        period[(nprocs, band, label)]
                        + drift[(nprocs, band, label, k)]
                        + rng.normal(0, 0.02)
                    )
                    for k in range(LAUNCHES)
                ]
                times = scaled(states, factors, 0.04, int(rng.integers(1 << 30)))
                rows += launch_rows(COLLECTIVE, label, size, times, nprocs=nprocs)
    return rows


def _launch_keys(labels: tuple[str, ...]) -> list[tuple]:
    return [
        (nprocs, band, label, k)
        for nprocs in COUNTS
        for band in range(3)
        for label in labels
        for k in range(LAUNCHES)
    ]


def _rows(run_dir: Path):
    _, frame, warn = _read_run(run_dir)
    rows, _, _ = select_rows(without_library_candidates(usable_rows(frame)), None, None)
    return rows, warn


@dataclass
class Score:
    """Running totals of one rule's figures over the simulated pairs."""

    stable: int = 0
    judged: int = 0
    gained: float = 0.0
    available: float = 0.0
    regret: float = 0.0
    points: int = 0
    null_wins: int = 0
    slower: int = 0

    def add_choice(self, nprocs: int, size: int, chosen: str) -> None:
        """Judge one choice against the true curves."""
        truth = {label: true_ratio(label, nprocs, size) for label in CANDIDATES}
        truth["native"] = 1.0
        best = min(truth.values())
        self.points += 1
        self.regret += truth[chosen] / best - 1
        self.null_wins += chosen == NULL
        self.slower += truth[chosen] > SLOWER_MARGIN
        if 1 / best >= CAPTURE_MIN:
            self.available += -math.log(best)
            self.gained += -math.log(truth[chosen])

    def add_stability(self, chosen: str, equivalent: tuple[str, ...]) -> None:
        """Whether a choice lies in the other sweep's all-candidate tie set."""
        self.judged += 1
        self.stable += chosen in equivalent

    def figures(self) -> dict[str, float]:
        """Stability, captured speedup, true mean regret and null wins, in percent."""
        return {
            "stability": 100 * self.stable / self.judged,
            "captured": 100 * self.gained / self.available,
            "regret": 100 * self.regret / self.points,
            "null_wins": 100 * self.null_wins / self.points,
            "slower": 100 * self.slower / self.points,
        }


def simulate(
    rules: dict[str, DecisionRule | None],
    pairs: int = 8,
    seed: int = 0,
    unpooled: tuple[str, ...] = (),
) -> dict[str, dict[str, float]]:
    """Each rule's figures over ``pairs`` simulated A/B pairs (None: the old rule); the
    rules named in ``unpooled`` decide on each process count's curves alone."""
    scores = {name: Score() for name in rules}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(pairs):
            runs = []
            for side in "AB":
                path = write_run(
                    Path(tmp) / f"{pair}{side}", sweep_rows(seed + 2 * pair + ord(side))
                )
                runs.append(_rows(path))
            estimates = [estimate_run(rows, list(warn)) for rows, warn in runs]
            judges = [decide_estimates(e, []).by_point() for e in estimates]
            for name, rule in rules.items():
                picks = [
                    old_rule.decide_estimates(e, [])
                    if rule is None
                    else decide_estimates(
                        replace(e, ratios=e.curves) if name in unpooled else e, [], rule
                    ).by_point()
                    for e in estimates
                ]
                _judge(scores[name], picks, judges)
    return {name: score.figures() for name, score in scores.items()}


def _judge(score: Score, picks: list[dict], judges: list[dict]) -> None:
    """Both sweeps' choices against the truth, each against the other sweep's tie sets."""
    for mine, other in ((0, 1), (1, 0)):
        for point_key, point in picks[mine].items():
            score.add_choice(point.key.nprocs, point.size, point.chosen)
            judge = judges[other].get(point_key)
            if judge is not None:
                score.add_stability(point.chosen, judge.equivalent)


@dataclass(frozen=True)
class CredibleGainRule(DecisionRule):
    """The rule with a credible gain required as well: a candidate is eligible only where
    its chance of being slower than native at all is at most ``gain_risk`` (the
    alternative the null control suggests: it bounds the choice of an equal)."""

    gain_risk: float = 0.2

    def eligible(self, ratios, reference):
        """The rule's eligible candidates less those not credibly faster than native."""
        return [
            label
            for label in super().eligible(ratios, reference)
            if reference is None
            or label == reference
            or ratios[label].chance_above(1.0) <= self.gain_risk
        ]


def main() -> None:
    """Print the figures of the old rule and of the new one over a grid of settings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8, help="A/B pairs (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    args = parser.parse_args()
    rules: dict[str, DecisionRule | None] = {"old rule": None}
    for risk in (0.05, 0.1, 0.2, 0.3):
        for zone in (0.01, 0.02, 0.03):
            rules[f"risk {risk} zone {zone:.0%}"] = DecisionRule(risk, zone)
    rules["risk 0.2 zone 2% unpooled"] = DecisionRule(0.2, 0.02)
    rules["+ P(slower) <= 0.2"] = CredibleGainRule(0.2, 0.02, 0.2)
    results = simulate(rules, args.pairs, args.seed, unpooled=("risk 0.2 zone 2% unpooled",))
    print(
        f"{'rule':<24}{'stability':>10}{'captured':>10}{'regret':>8}{'null wins':>10}"
        f"{'>5% slower':>11}"
    )
    for name, f in results.items():
        print(
            f"{name:<24}{f['stability']:>9.1f}%{f['captured']:>9.1f}%{f['regret']:>7.2f}%"
            f"{f['null_wins']:>9.2f}%{f['slower']:>10.2f}%"
        )


if __name__ == "__main__":
    main()
