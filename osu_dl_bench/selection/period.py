"""The between-period component: the machine's state drifts over minutes to hours (two
back-to-back sweeps of this machine differed by 15% at the median point), beyond what one
sweep's launches, spread over its own wall time, can see. It widens the intervals a table,
a summary or an explanation prints (``Ratio.reported``), never the decision: in
simulation, adding it to the risk rule only made the rule more conservative.

Estimated from two sweeps of the same machine (``compare A B``): at every point and
candidate both decided, d = ln ratio_A - ln ratio_B has variance sd_A^2 + sd_B^2 (each
run's own interval) plus twice the between-period variance (each run drew its own
period). The variance is the x >= 0 at which the median over pairs of
F_chi2(d^2 / (sd_A^2 + sd_B^2 + 2x), 1) is one half: the launch pools' robust method of
moments (selection.evidence). Every point of a size band of one entry shares the two runs'
periods, so the estimate rests on one degree of freedom per (entry, band) compared, not
one per pair. It is stored with run B (PERIOD, written atomically) and read by ``tune``
of that run.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import UnreadableJson, parse_json, read_regular_file
from osu_dl_bench.paths import PERIOD, write_text_atomic
from osu_dl_bench.selection.evidence import band_of
from osu_dl_bench.selection.paired import Ratio
from osu_dl_bench.stats.components import solve_median


@dataclass(frozen=True)
class Period:
    """A between-period sd of log time ratios, its df and where it comes from."""

    sd: float
    df: float
    pairs: int  # (point, candidate) pairs it rests on
    source: str  # e.g. 'compare RUN_A RUN_B'

    def apply(self, ratio: Ratio) -> Ratio:
        """``ratio`` carrying this component (its reported interval widens by it)."""
        if ratio.low == ratio.high:  # the reference against itself: nothing to widen
            return ratio
        return replace(ratio, period_sd=self.sd, period_df=self.df)

    def line(self) -> str:
        """One line for the table's summary."""
        return (
            f"between-period sd {self.sd * 100:.1f}% (df {self.df:g}, {self.pairs} pairs) "
            f"from {self.source}: widens the reported intervals, not the decisions"
        )

    def as_record(self) -> dict:
        """JSON-ready."""
        return asdict(self)


# What the table says where no between-period estimate is stored with the run.
WITHIN_ONLY = (
    "between-period: none stored with this run (compare it with an earlier sweep of the "
    "same machine to estimate it): the intervals hold the drift within this sweep's "
    "launches only"
)


def between_runs(pairs: Iterable[tuple[object, int, Ratio, Ratio]], source: str) -> Period | None:
    """The between-period component from (entry key, size, ratio in A, ratio in B) of the
    same candidate; None where no pair has finite intervals in both runs."""
    diffs, known, groups = [], [], set()
    for key, size, mine, theirs in pairs:
        if not (_finite(mine) and _finite(theirs)):
            continue
        diffs.append(math.log(mine.ratio) - math.log(theirs.ratio))
        known.append(mine.sd**2 + theirs.sd**2)
        groups.add((key, band_of(size)))
    if not diffs:
        return None
    stat = np.square(diffs)
    variance = solve_median(stat, np.ones_like(stat), np.array(known), np.full_like(stat, 2.0))
    return Period(math.sqrt(variance), float(len(groups)), len(diffs), source)


def _finite(ratio: Ratio) -> bool:
    return 0 < ratio.low < ratio.high < math.inf and ratio.ratio > 0


def write_period(run_dir: str | Path, period: Period) -> Path:
    """Store ``period`` with the run (atomically; the run's own file)."""
    path = Path(run_dir) / PERIOD
    write_text_atomic(path, json.dumps(period.as_record(), indent=2) + "\n", run_store=True)
    return path


# The largest between-period sd read back, on the log scale: a factor of e^5 (about 150x)
# between periods is no drift of one machine but a damaged or hostile file.
MAX_PERIOD_SD = 5.0
# Far above a record's few hundred bytes; a larger file is none of compare's.
MAX_PERIOD_BYTES = 64 << 10


def stored_text(run_dir: str | Path) -> str | None:
    """What a write of the period would replace in the run, in words (None: nothing)."""
    try:
        earlier = read_period(run_dir)
    except UsageError:
        return f"a {PERIOD} that held no between-period record"
    if earlier is None:
        return None
    return f"the earlier estimate (sd {earlier.sd * 100:.1f}% from {earlier.source})"


def read_period(run_dir: str | Path) -> Period | None:
    """The between-period component stored with the run, or None; a damaged file (not
    JSON, a FIFO or device, too large, out of range) is one clear error naming it."""
    path = Path(run_dir) / PERIOD
    if not os.path.lexists(path):
        return None
    try:
        # The bounded, never-blocking read: a FIFO here must not hang tune.
        record = parse_json(read_regular_file(path, MAX_PERIOD_BYTES))
        if not isinstance(record, dict):
            raise TypeError("not an object")
        period = Period(
            float(record["sd"]), float(record["df"]), int(record["pairs"]), str(record["source"])
        )
    except (UnreadableJson, ValueError, TypeError, KeyError) as exc:
        raise UsageError(
            f"{path}: not a between-period record ({exc}); remove it or run compare again"
        ) from None
    if not (0 <= period.sd <= MAX_PERIOD_SD and period.df > 0):
        raise UsageError(
            f"{path}: sd {period.sd}, df {period.df}: out of range (sd from 0 to "
            f"{MAX_PERIOD_SD:g} on the log scale, df > 0); remove it or run compare again"
        )
    return period
