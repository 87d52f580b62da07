"""A ratio of two times with its 95% confidence interval, read on the log scale: Student's
t at the degrees of freedom of what estimated it (a normal reading where they are
infinite), the chance that it exceeds a threshold, the quotient of two ratios to one
reference, and the expected loss of taking one for another under a lognormal reading
(Margrabe's exchange value). The ratios' sources (a point's paired rounds and launches,
a run's pooled evidence) build them; this module only reads them.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass, replace

from osu_dl_bench.stats.components import remainder_df, satterthwaite

LEVEL = 0.95
# The standard normal quantile of a two-sided LEVEL interval (1.96 at 95%), from the
# standard library: every command's option parsing reaches this module, and scipy's
# import costs each rank of a job about a fifth of a second.
Z_LEVEL = statistics.NormalDist().inv_cdf(0.5 + LEVEL / 2)


@dataclass(frozen=True)
class Ratio:
    """time(candidate) / time(reference) at one point, with its 95% interval and what it
    rests on: the launches paired and the values pooled (rounds, or rows for legacy)."""

    ratio: float
    low: float
    high: float
    launches: int
    rounds: int
    # Where the estimate comes from: 'paired' (this point's rounds and launches alone),
    # 'curve' (the smoothed curve over sizes with the run's pooled launch variance),
    # 'point' (the point's own estimate with the pooled variance: too few sizes for a
    # curve), 'misfit' (the same, where the curve misses the point), 'heterogeneous'
    # (its launches disagree beyond the pool: its own spread), 'pooled' (a curve's,
    # 'point' or 'misfit' estimate partially pooled with the same candidate's at the other
    # process counts: selection.pooling).
    evidence: str = "paired"
    # The sd of the part of ln(ratio)'s error that every candidate's estimate at this point
    # shares (native's own launch drift): it cancels in a comparison of two candidates.
    common_sd: float = 0.0
    # Degrees of freedom behind the interval: Student's t with ``df`` set its width
    # (Welch-Satterthwaite over the variance components, each with the df of what
    # estimated it); inf: a normal reading (bootstrap intervals, legacy rows).
    df: float = math.inf
    # The launch-level df: the launches, less one, that estimated the components shared by
    # a pool's points (the band-wide shift); the df of common_sd's part too.
    launch_df: float = math.inf
    # The between-period sd of ln(ratio) (the machine's drift over minutes to hours) and
    # its df: it widens the reported interval (reported()), never the decision.
    period_sd: float = 0.0
    period_df: float = math.inf

    @property
    def quantile(self) -> float:
        """The two-sided LEVEL quantile the interval was built with (t at ``df``)."""
        return t_quantile(self.df)

    @property
    def log_sd(self) -> float:
        """The standard deviation of ln(ratio) implied by the 95% interval read as a normal
        one (the interval's half-width over 1.96)."""
        if self.low <= 0 or self.high <= 0:
            return math.inf
        return (math.log(self.high) - math.log(self.low)) / (2 * Z_LEVEL)

    @property
    def sd(self) -> float:
        """The standard error of ln(ratio): the interval's half-width over its t quantile
        (log_sd where df is infinite)."""
        if self.low <= 0 or self.high <= 0:
            return math.inf
        return (math.log(self.high) - math.log(self.low)) / (2 * self.quantile)

    def chance_above(self, threshold: float) -> float:
        """P(the true ratio exceeds ``threshold``), reading the interval as Student's t one
        at ``df`` on the log scale (normal where df is infinite), with the half of it on
        the threshold's side (a bootstrap interval need not be symmetric)."""
        if not (self.ratio > 0 and threshold > 0):
            return 0.5
        centre, target = math.log(self.ratio), math.log(threshold)
        bound = self.high if target >= centre else self.low
        if not 0 < bound < math.inf:
            return 0.5
        sd = abs(math.log(bound) - centre) / self.quantile
        if sd == 0:
            return float(centre > target)
        from scipy import stats  # at first use: option parsing reaches this module

        return float(stats.t.sf((target - centre) / sd, self.df))

    def reported(self) -> Ratio:
        """The interval a table, summary or explanation prints: this one widened by the
        between-period variance (the decision keeps the within-run interval)."""
        if self.period_sd <= 0 or not 0 < self.low <= self.high < math.inf:
            return self
        # Products, not **: a huge sd overflows to inf instead of raising OverflowError.
        within = self.sd * self.sd
        period = self.period_sd * self.period_sd
        if not math.isfinite(within + period):  # no bound left: printed as unbounded
            return replace(self, low=0.0, high=math.inf, period_sd=0.0)
        df = satterthwaite([(within, self.df), (period, self.period_df)])
        half = t_quantile(df) * math.sqrt(within + period)
        centre = math.log(self.ratio)
        low = min(math.log(self.low), centre - half)
        high = max(math.log(self.high), centre + half)
        return replace(self, low=_exp(low), high=_exp(high), df=df, period_sd=0.0)

    @property
    def expected(self) -> float:
        """The expected ratio under that reading: exp(mean + sd^2 / 2)."""
        sd = self.log_sd
        if not math.isfinite(sd):
            return math.inf
        try:
            return self.ratio * math.exp(sd * sd / 2)
        except OverflowError:  # a spread past exp's range (sd > 37): no useful expectation
            return math.inf

    @property
    def below_one(self) -> bool:
        """The candidate is faster beyond the noise: the whole interval lies below 1."""
        return self.high < 1

    def overlaps(self, other: Ratio) -> bool:
        """The two intervals share a value (this one does not start above ``other``'s)."""
        return self.low <= other.high and other.low <= self.high

    @property
    def log_ratio(self) -> float:
        """ln(ratio), for averaging ratios over sizes."""
        return math.log(self.ratio)


# ln of the largest float: exp of anything above it overflows.
_LOG_MAX = math.log(sys.float_info.max)


def _exp(value: float) -> float:
    """exp(value), inf past the largest float (math.exp raises OverflowError there)."""
    return math.exp(value) if value < _LOG_MAX else math.inf


def t_quantile(df: float, level: float = LEVEL) -> float:
    """Student's t two-sided ``level`` quantile at ``df`` (the normal one where df is
    infinite; infinite below one degree of freedom)."""
    from scipy import stats  # at first use: option parsing reaches this module

    if math.isinf(df):
        return float(stats.norm.ppf(0.5 + level / 2))
    return float(stats.t.ppf(0.5 + level / 2, df)) if df >= 1 else math.inf


def quotient(mine: Ratio, theirs: Ratio) -> Ratio:
    """mine / theirs for two ratios to the same reference: the log-scale variances added,
    less twice the part they share (common_sd), with the Welch-Satterthwaite df of what is
    left (the shared part's df leaves with it)."""
    parts, shared = [], []
    for ratio in (mine, theirs):
        total = ratio.sd**2
        common = min(ratio.common_sd, ratio.sd) ** 2  # no more than the whole
        shared.append(math.sqrt(common))
        parts.append((total - common, remainder_df(total, ratio.df, common, ratio.launch_df)))
    # What the two shared parts do not cancel: (sd_a - sd_b)^2, estimated from launches.
    parts.append(((shared[0] - shared[1]) ** 2, min(mine.launch_df, theirs.launch_df)))
    variance = sum(c for c, _ in parts)
    df = satterthwaite(parts)
    centre = math.log(mine.ratio) - math.log(theirs.ratio)
    half = t_quantile(df) * math.sqrt(variance)
    launches = min(mine.launches, theirs.launches)
    return Ratio(
        math.exp(centre),
        math.exp(centre - half),
        math.exp(centre + half),
        launches,
        mine.rounds,
        mine.evidence,
        df=df,
        launch_df=min(mine.launch_df, theirs.launch_df),
    )


def exchange_value(mine: Ratio, theirs: Ratio, apart_sd: float) -> float:
    """E[(A - B)+] for A and B jointly lognormal, A and B read from the two ratios (log
    means and sds from their intervals) and ``apart_sd`` the sd of ln(A / B): Margrabe's
    formula ("The Value of an Option to Exchange One Asset for Another", J. Finance 33,
    1978): E[A] Phi(d1) - E[B] Phi(d2), d1 = (ln(E[A] / E[B]) + s^2 / 2) / s, d2 = d1 - s."""
    first, second = mine.expected, theirs.expected
    if not (math.isfinite(first) and math.isfinite(second) and math.isfinite(apart_sd)):
        return math.inf
    if apart_sd == 0:
        return max(first - second, 0.0)
    d1 = (math.log(first / second) + apart_sd * apart_sd / 2) / apart_sd
    d2 = d1 - apart_sd
    from scipy import stats  # at first use: option parsing reaches this module

    return max(float(first * stats.norm.cdf(d1) - second * stats.norm.cdf(d2)), 0.0)
