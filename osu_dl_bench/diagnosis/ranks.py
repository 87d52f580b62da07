"""Which rank or node is late or slow, from the per-rank timing that bench --per-rank and
sweep keep (measurement.ranks).

The evidence is one row per (point, rank): the rank's median lag behind the earliest
arrival, its median finish after the earliest, and the point's call time. Each point is
one sample per rank, judged as a share of the call's own time (the call time less the
latest rank's lag: what the collective takes once every rank is in), so that points of
different sizes weigh alike and a lag that is small beside the call is not a finding:

- late: arrives after the others (``lag``);
- slow: finishes after the others although it does not arrive late (``finish``).

A rank (or node: at each point, its latest rank) is named when diagnosis.outliers says its
shares lie beyond its peers' by more than the peers differ among themselves and by more
than ``min_share`` (differences only: the lags of the punctual ranks are near zero, so
their ratios mean nothing); the evidence
printed beside it is in microseconds: its median against the peers', with a 95% interval,
and at how many points it passed ``min_share``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from osu_dl_bench.diagnosis import MIN_SHARE
from osu_dl_bench.diagnosis.outliers import Finding, against_peers, stand_out
from osu_dl_bench.measurement.store import round_values
from osu_dl_bench.runtime.text import one_line

EVIDENCE_COLUMNS = (
    "point",
    "size_bytes",
    "rank",
    "node",
    "lag_us",
    "finish_us",
    "wait_us",
    "call_us",
    "residual_us",
)
# Small messages are bound by latency and large ones by bandwidth, so a slow link shows
# in one regime only: each is judged on its own (64 KiB: where OSU's large-message
# settings begin, LARGE_MESSAGE_SIZE in osu_util.h). A regime needs a few points to be
# judged at all.
REGIMES = (("messages < 64 KiB", 0, 65536), ("messages >= 64 KiB", 65536, None))
MIN_POINTS = 3


@dataclass(frozen=True)
class Named:
    """A rank or node named late or slow: the verdict's finding (in shares of the call
    time), the same in microseconds, and at how many points it passed the minimum."""

    kind: str  # "late" or "slow"
    regime: str
    unit: str
    share: Finding
    micros: Finding | None
    points_over: int
    points: int


class NotPerRankTiming(ValueError):
    """A record whose per-rank timing is not what bench --per-rank writes; the message
    says which record and what."""


# A rank's times, as bench --per-rank writes them: finite, 0 or more (the earliest rank's
# lag is 0), as the run directory's reader requires of the same cells (measurement.store).
RANK_TIMES = ("lag_us", "finish_us", "wait_us")
# More ranks than any job this suite launches: a record naming more is not bench's.
MOST_RANKS = 1 << 20


def evidence_from_records(records: pd.DataFrame) -> pd.DataFrame:
    """The evidence of bench records written with --per-rank (their per_rank field);
    NotPerRankTiming naming the first record that is not as bench writes it."""
    rows = []
    for number, record in enumerate(records.to_dict("records"), start=1):
        try:
            rows += _record_evidence(record)
        except (KeyError, TypeError, ValueError) as exc:
            why = f"no {exc.args[0]}" if isinstance(exc, KeyError) else str(exc)
            raise NotPerRankTiming(f"record {number}: {why}") from None
    return pd.DataFrame(rows, columns=EVIDENCE_COLUMNS)


def _record_evidence(record: dict[str, Any]) -> list[dict[str, Any]]:
    size = _number(record["size_bytes"], "size_bytes")
    call = _number(record.get("p50_us") or record.get("avg_us") or 0.0, "p50_us")
    residual = _number(record.get("clock_residual_us") or 0.0, "clock_residual_us")
    point = f"{record['collective']} {record['algorithm']} {int(size)} B"
    rows = []
    for entry in _per_rank_list(record.get("per_rank")):
        if not isinstance(entry, dict):
            raise ValueError("per_rank holds something other than one object per rank")
        rank = _number(entry["rank"], "rank")
        if rank != int(rank) or rank >= MOST_RANKS:
            raise ValueError(f"rank {entry['rank']!r:.30} is not a rank's number")
        times = {name: _number(entry[name], f"rank {int(rank)}'s {name}") for name in RANK_TIMES}
        rows.append(
            {
                "point": point,
                "size_bytes": int(size),
                "rank": int(rank),
                "node": str(entry.get("node", "")),
                **times,
                "call_us": call,
                "residual_us": residual,
            }
        )
    return rows


def _number(value: Any, name: str) -> float:
    """``value`` as a finite number of 0 or more (ValueError naming ``name`` otherwise)."""
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if number is None and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not (math.isfinite(number) and 0 <= number < 1e300):
        raise ValueError(f"{name} is {value!r:.30}, expected a finite number of 0 or more")
    return float(number)


def _per_rank_list(value: Any) -> list:
    """A record's per_rank field, as JSON text (CSV, Parquet) or a list (JSON)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise ValueError("per_rank is not the JSON list bench writes") from None
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    if isinstance(value, np.ndarray):  # Parquet's lists come back as arrays
        value = value.tolist()
    if not isinstance(value, list):
        raise ValueError("per_rank is not the list bench writes")
    return value


def evidence_from_run(results: pd.DataFrame, metadata: dict[str, Any]) -> pd.DataFrame:
    """The evidence of a sweep's rows that carry per-rank columns (nodes from each
    launch's metadata)."""
    rows = []
    if "rank_lag_us" not in results:
        return pd.DataFrame(rows, columns=EVIDENCE_COLUMNS)
    for row in results.to_dict("records"):
        lags = round_values(row["rank_lag_us"])
        if not lags.size:
            continue
        finish, wait = round_values(row["rank_finish_us"]), round_values(row["rank_wait_us"])
        if not finish.size == wait.size == lags.size:
            continue
        nodes, residual = _rank_nodes(metadata, row)
        point = (
            f"p={row['nprocs']} {row['collective']} {row['algorithm']} {row['size_bytes']} B"
            f" launch {row['launch']}"
        )
        for rank in range(lags.size):
            rows.append(
                {
                    "point": point,
                    "size_bytes": int(row["size_bytes"]),
                    "rank": rank,
                    "node": nodes[rank] if rank < len(nodes) else "",
                    "lag_us": lags[rank],
                    "finish_us": finish[rank],
                    "wait_us": wait[rank],
                    "call_us": float(row["median_us"]),
                    "residual_us": residual,
                }
            )
    return pd.DataFrame(rows, columns=EVIDENCE_COLUMNS)


def _rank_nodes(metadata: dict[str, Any], row: dict[str, Any]) -> tuple[list[str], float]:
    """Each rank's node in the launch that measured ``row`` ([] if not recorded), and the
    launch's clock residual (0 if not recorded)."""
    job = _object(_object(metadata.get("jobs")).get(str(row["nprocs"])))
    launch = _object(_object(job.get("launches")).get(f"{row['launch']}/{row['group']}", job))
    nodes, residual = launch.get("rank_nodes", []), launch.get("clock_residual_us", 0.0)
    residual = float(residual) if isinstance(residual, (int, float)) else 0.0
    return ([str(n) for n in nodes] if isinstance(nodes, list) else []), residual


def _object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a hand-edited metadata.json)."""
    return value if isinstance(value, dict) else {}


def _label(rank: int, node: str) -> str:
    node = one_line(node)[:40]  # a node name is the host's: shown, never obeyed
    return f"rank {rank} ({node})" if node else f"rank {rank}"


def _samples(evidence: pd.DataFrame, by: str, column: str, share: bool) -> dict[str, np.ndarray]:
    """Per unit (rank label or node), its values of ``column``: as shares of the call's
    own time, or in microseconds."""
    values = evidence[column] / evidence["work_us"] if share else evidence[column]
    return {str(unit): values[group.index].to_numpy() for unit, group in evidence.groupby(by)}


def _named(
    evidence: pd.DataFrame,
    by: str,
    column: str,
    kind: str,
    min_share: float,
    skip: set[str],
    regime: str = "",
) -> list[Named]:
    """The units of ``by`` whose ``column`` stands out, with their evidence."""
    shares = _samples(evidence, by, column, share=True)
    micros = _samples(evidence, by, column, share=False)
    found = []
    for finding in stand_out(shares, "higher", None, min_share):
        if finding.name in skip:
            continue
        over = int(np.sum(shares[finding.name] > min_share))
        found.append(
            Named(
                kind,
                regime,
                finding.name,
                finding,
                against_peers(micros, finding.name),
                over,
                shares[finding.name].size,
            )
        )
    return found


def _own_time(evidence: pd.DataFrame) -> pd.Series:
    """Per row, its point's own call time: the call time less the latest rank's lag (the
    time the collective takes once everyone is in, without the wait for a late rank),
    at least a tenth of the call time."""
    latest = evidence.groupby("point")["lag_us"].transform("max")
    return np.maximum(evidence["call_us"] - latest, 0.1 * evidence["call_us"])


def triage(evidence: pd.DataFrame, min_share: float = MIN_SHARE) -> list[Named]:
    """Late and slow ranks, then late and slow nodes (where the run spans several), in
    each message regime that holds enough points."""
    evidence = evidence[evidence["call_us"] > 0].copy()
    evidence["work_us"] = _own_time(evidence)
    evidence["unit"] = [
        _label(r, n) for r, n in zip(evidence["rank"], evidence["node"], strict=True)
    ]
    named = []
    for regime, part in regimes(evidence).items():
        if part["point"].nunique() >= MIN_POINTS:
            named += _triage_regime(part, min_share, regime)
    # A lag the clocks cannot tell from zero is no finding, whatever its share.
    residual = float(np.nan_to_num(evidence["residual_us"].max()))
    return [n for n in named if n.micros is not None and n.micros.excess_ci[0] > residual]


def regimes(evidence: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The evidence of each message regime that holds any."""
    found = {}
    for regime, low, high in REGIMES:
        sizes = evidence["size_bytes"]
        part = evidence[(sizes >= low) & (sizes < high if high else True)]
        if not part.empty:
            found[regime] = part
    return found


def _triage_regime(evidence: pd.DataFrame, min_share: float, regime: str) -> list[Named]:
    named = _named(evidence, "unit", "lag_us", "late", min_share, set(), regime)
    late = {n.unit for n in named}
    named += _named(evidence, "unit", "finish_us", "slow", min_share, late, regime)
    if evidence["node"].nunique() > 1:
        # A node is as late as its latest rank at each point.
        by_node = evidence.groupby(["point", "node"], as_index=False).agg(
            lag_us=("lag_us", "max"), finish_us=("finish_us", "max"), work_us=("work_us", "max")
        )
        nodes = _named(by_node, "node", "lag_us", "late", min_share, set(), regime)
        late_nodes = {n.unit for n in nodes}
        nodes += _named(by_node, "node", "finish_us", "slow", min_share, late_nodes, regime)
        named += nodes
    return named


WHAT = {
    "late": "arrives after the others",
    "slow": "finishes after the others without arriving late",
}


def _us(value: float) -> str:
    return f"{value / 1000:.3g} ms" if abs(value) >= 1000 else f"{value:.3g} us"


def named_line(named: Named) -> str:
    """One finding as a sentence with its evidence."""
    share = named.share
    text = (
        f"{named.regime}: {one_line(named.unit)[:60]} {WHAT[named.kind]}: "
        f"{share.median:.2f} of the call's own time against its peers' {share.peers:.2f} "
        f"(95% CI of the difference {share.excess_ci[0]:.2f}-{share.excess_ci[1]:.2f})"
    )
    if named.micros is not None:
        m = named.micros
        text += (
            f"; by {_us(m.excess)} (95% CI {_us(m.excess_ci[0])}-{_us(m.excess_ci[1])}) "
            f"more than its peers' median {_us(m.peers)}"
        )
    return text + f"; at {named.points_over} of {named.points} points"


def report_lines(evidence: pd.DataFrame, named: list[Named], min_share: float) -> list[str]:
    """The triage report: what was read, then the named ranks and nodes or 'nothing
    stands out'."""
    points, ranks = evidence["point"].nunique(), evidence["rank"].nunique()
    nodes = sorted(n for n in evidence["node"].unique() if n)
    residual = float(np.nan_to_num(evidence["residual_us"].max()))
    judged = {r: p["point"].nunique() for r, p in regimes(evidence).items()}
    lines = [
        f"# {points} points x {ranks} ranks on {len(nodes) or 'unknown'} node(s)"
        + (f" ({', '.join(one_line(n)[:40] for n in nodes)})" if nodes else ""),
        f"# named: a share of the call's own time beyond the peers' own spread and above "
        f"{min_share:g} of the call's own time, and a lag beyond the clocks' alignment "
        f"({residual:.1f} us); 95% intervals by bootstrap over points",
        "# "
        + "; ".join(
            f"{r}: {n} points" + ("" if n >= MIN_POINTS else f", too few to judge (< {MIN_POINTS})")
            for r, n in judged.items()
        ),
    ]
    if not any(n >= MIN_POINTS for n in judged.values()):
        return [*lines, f"too few points to judge: at least {MIN_POINTS} sizes per regime"]
    for kind in WHAT:
        found = [n for n in named if n.kind == kind]
        lines.append(f"{kind}:")
        lines += [f"  {named_line(n)}" for n in found] or ["  nothing stands out"]
    return lines
