"""A table's decision rule in words (rule_text). The rule itself, one object with one
default, is osu_dl_bench.stats.decision's DecisionRule."""

from __future__ import annotations

from collections.abc import Mapping

# The rule and its defaults live in osu_dl_bench.stats.decision (Margrabe's exchange value
# with the intervals); re-exported here for the callers that import them from this module.
from osu_dl_bench.stats.decision import (  # noqa: F401
    DEFAULT_RULE,
    INDIFFERENCE,
    RISK,
    SLOWER_MARGIN,
    DecisionRule,
)
from osu_dl_bench.stats.intervals import exchange_value  # noqa: F401


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
