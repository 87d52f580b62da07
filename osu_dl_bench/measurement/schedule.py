"""How long to measure a point, and the statistics of its rounds (pure arithmetic, no MPI).

A point's candidates are timed in rounds; in each round every candidate runs
``iterations`` times, one candidate after the other. Growing untimed passes fix the
iterations so that MAX_ROUNDS rounds would fill the budget; rounds then go on until the
budget is spent (at least MIN_ROUNDS, at most MAX_ROUNDS). So a sweep's duration depends
on its number of points, not on the machine's speed (which may change right after those
passes) nor on how many algorithms are registered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# At least 5 rounds, so quartiles mean something even when one round blows the budget
# (big messages, many candidates); at most 40: short rounds sample the machine's speed
# states more evenly than long ones, and past 40 the quartiles hardly move.
MIN_ROUNDS = 5
MAX_ROUNDS = 40
# OSU's default iteration count for small messages: beyond it a round only gets longer.
MAX_ITERATIONS = 1000
# Share of the budget spent finding the time of one iteration before the timed rounds.
ITERATION_SHARE = 0.05


@dataclass(frozen=True)
class Schedule:
    """Timed rounds of one point, and iterations of every candidate per round."""

    rounds: int
    iterations: int


def iterations_for(seconds_per_iteration: float, budget: float) -> int:
    """Iterations per round such that MAX_ROUNDS rounds fill ``budget`` seconds, when one
    iteration of every candidate (barriers included) takes ``seconds_per_iteration``."""
    if budget <= 0:
        raise ValueError(f"budget must be positive, got {budget}")
    fits = math.floor(budget / max(seconds_per_iteration, 1e-9))
    return min(MAX_ITERATIONS, max(1, fits // MAX_ROUNDS))


def candidate_budget(budget: float, measured: int, candidates: int) -> float:
    """A point's seconds when ``measured`` of its ``candidates`` are timed: their share of
    ``budget``, so that each candidate gets the same time whatever else is measured and a
    launch that measures fewer (an adaptive sweep's focus) takes less."""
    if not 0 < measured <= candidates:
        raise ValueError(f"expected 1 to {candidates} candidates measured, got {measured}")
    return budget * measured / candidates


def another_round(rounds_done: int, elapsed: float, budget: float) -> bool:
    """Whether to time one more round after ``rounds_done`` took ``elapsed`` seconds."""
    if rounds_done < MIN_ROUNDS:
        return True
    return rounds_done < MAX_ROUNDS and elapsed < budget


def next_iteration_count(count: int, seconds: float, target: float) -> int | None:
    """Iterations for the next pass that times one iteration, or None once ``seconds`` reached
    ``target`` (timeit's autorange, jumping by the measured ratio up to 10x)."""
    if seconds >= target or count >= MAX_ITERATIONS:
        return None
    factor = 10.0 if seconds <= 0 else min(10.0, max(2.0, 1.2 * target / seconds))
    return min(MAX_ITERATIONS, math.ceil(count * factor))


def _williams_row(candidates: int) -> list[int]:
    """0, 1, n-1, 2, n-2, ...: the first row of a Williams design of n treatments."""
    row, low, high = [0], 1, candidates - 1
    while len(row) < candidates:
        row.append(low if len(row) % 2 else high)
        low, high = (low + 1, high) if len(row) % 2 == 0 else (low, high - 1)
    return row


def williams_cycle(candidates: int) -> int:
    """Rounds in one whole cycle of rotation's Williams design: n, or 2n for an odd n (only
    over whole cycles is each candidate in each position, and after each other, equally
    often)."""
    return candidates if candidates % 2 == 0 else 2 * candidates


def rotation(round_index: int, candidates: int) -> list[int]:
    """Candidate order in a round: the rows of a Williams design, in turn (E. J. Williams,
    "Experimental designs balanced for the estimation of residual effects of treatments",
    Aust. J. Sci. Res. 2, 1949): over n rounds (2n for an odd n) every candidate runs in
    every position, and right after every other candidate, equally often. A call leaves
    caches, the library's and the peers' state behind for the next one: with a plain
    cyclic rotation each candidate always followed the same other, and native's own copy
    (the null control), always right after native, ran 1.3-3x faster than native."""
    if candidates <= 1:
        return list(range(candidates))
    cycle = williams_cycle(candidates)
    row = round_index % cycle
    order = [(j + row) % candidates for j in _williams_row(candidates)]
    return order if row < candidates else order[::-1]


@dataclass(frozen=True)
class RoundStats:
    """One candidate's statistics over rounds, in microseconds."""

    median_us: float
    q1_us: float
    q3_us: float
    spread_us: float
    min_us: float
    max_us: float


def round_stats(iteration_max: np.ndarray) -> list[RoundStats]:
    """Per candidate, from times[round, candidate, iteration] (seconds, already the
    maximum across ranks): a round's time is the mean over its iterations; the median,
    quartiles, min and max are over rounds; spread = q3 - q1."""
    if iteration_max.ndim != 3 or 0 in iteration_max.shape:
        raise ValueError(
            f"expected a non-empty (rounds, candidates, iterations) array, got "
            f"shape {iteration_max.shape}"
        )
    per_round = iteration_max.mean(axis=2) * 1e6
    q1, median, q3 = np.percentile(per_round, [25, 50, 75], axis=0)
    lo, hi = per_round.min(axis=0), per_round.max(axis=0)
    return [
        RoundStats(float(m), float(a), float(b), float(b - a), float(x), float(y))
        for m, a, b, x, y in zip(median, q1, q3, lo, hi, strict=True)
    ]
