"""The decision rule: which candidate a table takes at one point, by expected loss.

Each candidate's time at a point is known as its ratio to native with an interval
(stats.intervals.Ratio, read as a normal on the log scale). The rule, one object with one
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
from typing import TYPE_CHECKING

from osu_dl_bench.errors import UsageError

if TYPE_CHECKING:
    from osu_dl_bench.stats.intervals import Ratio

# The intervals (quotient, exchange_value) load scipy.stats, seconds on a busy node: the
# methods that compare candidates import them, so that option parsing, which reads the
# defaults below, does not wait for scipy.

# The decision rule's defaults (their one home): the risk of a choice more than
# SLOWER_MARGIN slower than native, and the indifference zone. Chosen on simulated
# sweeps with this machine's curves and launch variances, never on the sweeps the tables
# are judged on: scripts/rule_simulation.py --pairs 16 --seed 1000 (risk 0.05-0.3, zone
# 1-3%) gives the lowest true mean regret at risk 0.2-0.3 with a 1-2% zone (1.30-1.35%;
# risk 0.05: 1.46-1.55%); a 2% zone lets the null-like candidate win at 1.56% of points
# against 2.08% at 1%, for 0.05 points of regret; risk 0.3 gains 0.04 points over 0.2,
# within the spread between seeds, so the lower risk. The old rule there: regret 3.72%,
# stability 84.4%, captured 81.9% (risk 0.2, zone 2%: 93.8%, 94.8%).
RISK = 0.2
INDIFFERENCE = 0.02
SLOWER_MARGIN = 1.05


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
        from osu_dl_bench.stats.intervals import quotient  # late: see above

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
        from osu_dl_bench.stats.intervals import exchange_value, quotient  # late: see above

        mine = ratios[label]
        losses = [
            exchange_value(mine, ratios[other], quotient(mine, ratios[other]).log_sd)
            for other in ratios
            if other != label
        ]
        return max(losses, default=0.0)


DEFAULT_RULE = DecisionRule()
