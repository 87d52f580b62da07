"""The decision rule: which candidate a table takes at one point, by expected loss.

Each candidate's time at a point is known as its ratio to native with an interval
(selection.paired.Ratio, read as a normal on the log scale). The rule, one object with one
default (DEFAULT_RULE) that ``tune``, ``compare``, ``select`` and ``sweep --adaptive`` share:

- eligible: native, and every candidate whose chance of being more than SLOWER_MARGIN
  slower than native is at most ``risk``;
- the eligible candidate with the lowest expected time (the mean of the lognormal, so an
  uncertain estimate pays for its spread) replaces native only where its expected gain
  over native exceeds the indifference zone (``indifference``: 2% by default);
- the tie set: every eligible candidate whose expected time lies within the zone of the
  best's; native first when it is in it, then by expected time. Neighbouring sizes keep
  one choice only while it stays within the zone at each (selection.tune.hysteresis).

A decision theorist's reading: with a loss linear in time, the Bayes choice is the one of
lowest posterior expected time (Berger, "Statistical Decision Theory and Bayesian
Analysis", 1985, ch. 2); the zone makes a switch away from the library's default pay for
itself, and the risk bounds the chance that it costs more than 5%. The old rule (native
whenever tied, else the simplest variant of the tie set) chose a tie set's simplest member
even where a faster one had passed the risk test, and its tie sets grew with the noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from scipy import stats

from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.names import INDIFFERENCE, RISK, SLOWER_MARGIN
from osu_dl_bench.selection.paired import Ratio, quotient


@dataclass(frozen=True)
class DecisionRule:
    """The expected-loss rule: the risk of a choice more than 5% slower than native, and
    the indifference zone within which candidates count as tied."""

    risk: float = RISK
    indifference: float = INDIFFERENCE

    def __post_init__(self) -> None:
        if not 0 <= self.risk <= 1 or math.isnan(self.risk):
            raise UsageError(f"the risk must lie in [0, 1], got {self.risk}")
        if not 0 <= self.indifference < 1 or math.isnan(self.indifference):
            raise UsageError(f"the indifference zone must lie in [0, 1), got {self.indifference}")

    def as_record(self) -> dict[str, float]:
        """The rule's settings, for a table's header."""
        return {
            "risk": self.risk,
            "indifference": self.indifference,
            "slower_margin": SLOWER_MARGIN,
        }

    def eligible(self, ratios: Mapping[str, Ratio], reference: str | None) -> list[str]:
        """The candidates that may be chosen: the reference and those whose chance of being
        more than 5% slower than it is at most the risk (all, without a reference)."""
        if reference is None:
            return list(ratios)
        return [
            label
            for label, ratio in ratios.items()
            if label == reference or ratio.chance_above(SLOWER_MARGIN) <= self.risk
        ]

    def within_zone(self, expected: float, best: float) -> bool:
        """Whether an expected time lies within the indifference zone of the best's."""
        return expected <= best * (1 + self.indifference)

    def tie_set(self, ratios: Mapping[str, Ratio], reference: str | None) -> list[str]:
        """The eligible candidates whose expected time lies within the zone of the lowest
        eligible one's, in the rule's order (its choice first)."""
        allowed = self.eligible(ratios, reference)
        best = min(ratios[label].expected for label in allowed)
        ties = [label for label in allowed if self.within_zone(ratios[label].expected, best)]
        return self.order(ties, ratios, reference)

    def order(
        self, labels: list[str] | set[str], ratios: Mapping[str, Ratio], reference: str | None
    ) -> list[str]:
        """``labels`` in the rule's order: the reference first, then the lower expected
        time (names break exact ties, so two runs order equals alike)."""
        return sorted(labels, key=lambda label: (label != reference, ratios[label].expected, label))

    def choose(self, ratios: Mapping[str, Ratio], reference: str | None) -> str:
        """The rule's choice at one point."""
        return self.tie_set(ratios, reference)[0]

    def equivalent(self, ratios: Mapping[str, Ratio]) -> list[str]:
        """Every candidate, eligible or not, that cannot be told from the fastest beyond
        the zone: the 95% interval of its time over the fastest's starts at or below
        1 + indifference (compared directly: the error they share cancels)."""
        fastest = min(ratios, key=lambda label: (ratios[label].expected, label))
        top = ratios[fastest]
        return [
            label
            for label, ratio in ratios.items()
            if label == fastest or quotient(ratio, top).low <= 1 + self.indifference
        ]

    def expected_loss(self, ratios: Mapping[str, Ratio], label: str) -> float:
        """The expected time lost by choosing ``label`` instead of the fastest of the
        others, in units of the reference's time: the largest, over the other candidates
        j, of E[(time(label) - time(j))+] (the maximum of pairwise losses bounds the loss
        against their minimum from below; it is exact with one contender)."""
        mine = ratios[label]
        losses = [
            exchange_value(mine, ratios[other], quotient(mine, ratios[other]).log_sd)
            for other in ratios
            if other != label
        ]
        return max(losses, default=0.0)


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
    return max(float(first * stats.norm.cdf(d1) - second * stats.norm.cdf(d2)), 0.0)


DEFAULT_RULE = DecisionRule()


def rule_text(evidence: Mapping | None) -> str:
    """A table's decision rule in words, from its header's evidence record (DecisionRule.
    as_record); older tables say what they hold."""
    if not evidence or "risk" not in evidence:
        return "decision rule: not recorded in this table"
    margin = float(evidence.get("slower_margin", SLOWER_MARGIN)) - 1
    risk = f"risk {evidence['risk']} of a choice more than {margin:.0%} slower than native"
    if "indifference" not in evidence:
        return (
            f"decision rule: the one before expected loss ({risk}; native whenever tied, else "
            "the tie set's simplest variant)"
        )
    return f"decision rule: expected loss, {risk}, indifference zone {evidence['indifference']:.0%}"
