"""bench linkmap's judgement: the latency and bandwidth matrices, the links and nodes that
stand out from their peers (diagnosis.outliers, the one rule), the printed report and
the machine-readable record.

Who is judged against whom, with diagnosis.outliers.stand_out (the one rule):
- a link, against the other links of one of its ends: "A->B" (bandwidth, what A sends
  to B; lower is worse) among A's other sends and among B's other receives, "A-B"
  (latency of a ping-pong, both ways; higher is worse) among A's and among B's other
  pairs. A link slower than its ends' other links is the path between them; each named
  link is shown once, with the group it stands out most in;
- a node all of whose links of one kind are named, against the links between the other
  nodes: "A sends" (every link from A), "A receives" (every link into A) by bandwidth
  and "A" (every pair with A) by latency. A node whose links are all slow is its own NIC
  or cable, not one path. Its own links are kept out of the reference, or a slow node
  would drag its peers' samples down with it (two nodes have no link apart: neither is
  named, nor is the link, which has no peers).
Judging a link against every other link instead fails exactly where it matters: one
slow node makes N - 1 of the N (N - 1) / 2 pairs slow, half of them at N = 4, and the
pooled peers' median then falls on either side by chance (measured: at N = 4 with one
node at 1/10, no link was named).

The record (``-o FILE.json``), which ``triage`` reads:

    {"kind": "linkmap", "format": 1,
     "hosts": ["node1", ...],               node names; a node's index is its position
     "leaders": [0, 1, ...],                the rank that measured for each node
     "settings": {"message_bytes", "window", "windows", "warmup_windows", "repetitions",
                  "latency_bytes", "latency_iterations", "latency_warmup"},
     "latency_us": [[null, 31.2, ...], ...],   median one-way latency, symmetric
     "bandwidth_mbs": [[null, 118.9, ...], ...],   median MB/s (1e6 B), row sends to column
     "pairs": [{"nodes": [A, B], "latency_us": SUMMARY}, ...],          A before B
     "links": [{"source": A, "target": B, "bandwidth_mbs": SUMMARY}, ...],   both ways
     "findings": [{"metric": "bandwidth" | "latency", "unit": "link" | "node",
                   "name": "A->B" | "A-B" | "A sends" | "A receives" | "A",
                   "nodes": [A, B] or [A], "direction": "sends" | "receives" | null,
                   "among": "A's sends" | "B's receives" | "A's pairs" | "the other nodes",
                   "median", "peers", "ratio", "ratio_ci": [lo, hi], "excess",
                   "excess_ci": [lo, hi], "share", "samples"}, ...],   worst first per kind
     "metadata": {...}}                     the run's metadata (library, hosts, command)

SUMMARY is {"median", "min", "max", "samples": [one per cycle, in cycle order]}; a value
that is not a number (a ratio against a zero median) is null. ``share`` is the fraction
of the unit's samples beyond the peers' 5th percentile (bandwidth) or 95th (latency).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from collectives.units import format_size
from osu_dl_bench import __version__
from osu_dl_bench.diagnosis.outliers import Finding, stand_out
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.bench_config import BW_WINDOW
from osu_dl_bench.measurement.linkmap import (
    LATENCY_BYTES,
    LATENCY_ITERATIONS,
    LinkSamples,
    LinkSettings,
    round_robin,
)
from osu_dl_bench.paths import os_reason, write_text_atomic

FORMAT = 1
KIND = "linkmap"
# Order statistics give a median's 95% interval from 6 samples on (0.5^5 > 2.5%).
FEWEST_FOR_AN_INTERVAL = 6
# A link or node is judged only from this many repetitions: one sample has no spread.
FEWEST_TO_JUDGE = 3
# The smallest effect worth a name (stand_out's min_ratio): bandwidth the rule's own 1.25;
# latency 2, because where a pair's two ranks run moves it by half on its own: on the
# cluster on one machine (4 nodes on 2 shared cores) pairs of uniform links sat at 9.5
# or at 14.5 us one way for a whole run, and at 1.25 a latency link was named in 6 of 10
# uniform runs. A link fault worth chasing (a lossy cable, a congested port) costs
# several times the latency, and a switch hop more or less is topology, not a fault.
MIN_RATIO = {"bandwidth": 1.25, "latency": 2.0}


@dataclass(frozen=True)
class Named:
    """A link or node that stands out, and the evidence."""

    metric: str  # "bandwidth" or "latency"
    unit: str  # "link" or "node"
    nodes: tuple[str, ...]  # the link's two nodes (source first), or the node
    direction: str | None  # a node's "sends" or "receives" (bandwidth); None otherwise
    among: str  # the peers it was judged against: "node1's sends", "the other nodes"
    finding: Finding


@dataclass(frozen=True)
class LinkMap:
    """The measured samples and what stands out in them."""

    samples: LinkSamples
    findings: tuple[Named, ...]

    def named(self, unit: str) -> list[Named]:
        """The findings about links or about nodes."""
        return [n for n in self.findings if n.unit == unit]


def link_name(source: str, target: str) -> str:
    """A direction of a link, as bandwidth names it."""
    return f"{source}->{target}"


def pair_name(a: str, b: str) -> str:
    """A pair of nodes, as latency names it."""
    return f"{a}-{b}"


def _medians(values: Mapping[tuple[int, int], Sequence[float]]) -> dict[tuple[int, int], float]:
    return {key: float(np.median(v)) for key, v in values.items() if len(v)}


def latency_matrix(samples: LinkSamples) -> list[list[float | None]]:
    """Median one-way latency (us) between every two nodes, symmetric; None on the
    diagonal and where nothing was measured."""
    n = len(samples.hosts)
    matrix: list[list[float | None]] = [[None] * n for _ in range(n)]
    for (a, b), value in _medians(samples.latency_us).items():
        matrix[a][b] = matrix[b][a] = value
    return matrix


def bandwidth_matrix(samples: LinkSamples) -> list[list[float | None]]:
    """Median bandwidth (MB/s) from each node (row) to each other (column)."""
    n = len(samples.hosts)
    matrix: list[list[float | None]] = [[None] * n for _ in range(n)]
    for (source, target), value in _medians(samples.bandwidth_mbs).items():
        matrix[source][target] = value
    return matrix


def _judge(
    units: Mapping[str, tuple[tuple[str, ...], str | None, Sequence[float]]],
    metric: str,
    unit: str,
    among: str,
) -> list[Named]:
    """stand_out over ``units`` (name -> (nodes, direction, samples)), judged ``among``."""
    worse = "lower" if metric == "bandwidth" else "higher"
    values = {name: values for name, (_, _, values) in units.items()}
    found = stand_out(values, worse=worse, min_ratio=MIN_RATIO[metric])
    return [Named(metric, unit, units[f.name][0], units[f.name][1], among, f) for f in found]


def _link_groups(samples: LinkSamples) -> list[tuple[str, str, dict]]:
    """(metric, among, units) per node: the links it sends on, those it receives on, its
    pairs; each unit name -> (nodes, None, samples)."""
    hosts = samples.hosts
    groups = []
    for node, host in enumerate(hosts):
        sends, receives, pairs = {}, {}, {}
        for (s, t), values in sorted(samples.bandwidth_mbs.items()):
            entry = ((hosts[s], hosts[t]), None, values)
            if s == node:
                sends[link_name(hosts[s], hosts[t])] = entry
            if t == node:
                receives[link_name(hosts[s], hosts[t])] = entry
        for (a, b), values in sorted(samples.latency_us.items()):
            if node in (a, b):
                pairs[pair_name(hosts[a], hosts[b])] = ((hosts[a], hosts[b]), None, values)
        groups += [
            ("bandwidth", f"{host}'s sends", sends),
            ("bandwidth", f"{host}'s receives", receives),
            ("latency", f"{host}'s pairs", pairs),
        ]
    return groups


def _strongest(found: list[Named]) -> list[Named]:
    """Each link once, with its strongest evidence (the group it stands out most in)."""
    best: dict[tuple[str, str], Named] = {}
    for named in found:
        key = (named.metric, named.finding.name)
        if key not in best or abs(named.finding.excess) > abs(best[key].finding.excess):
            best[key] = named
    return sorted(best.values(), key=lambda n: (n.metric, -abs(n.finding.excess)))


@dataclass(frozen=True)
class _NodeView:
    """One node's links of one kind (what it sends, receives, its pairs) and the links
    between the other nodes, one unit per other node (the links it sends on, the pairs
    it is the first of): the same pooled reference as one unit per link, at N rather
    than N^2 units to bootstrap."""

    metric: str
    direction: str | None
    names: frozenset[str]
    samples: list[float]
    apart: dict[str, tuple[tuple[str, ...], None, list[float]]]


_VIEWS = (("bandwidth", "sends"), ("bandwidth", "receives"), ("latency", None))


def _node_views(samples: LinkSamples, node: int) -> list[_NodeView]:
    """The node's three views: what it sends and receives (bandwidth), its pairs."""
    hosts = samples.hosts
    views = []
    for metric, direction in _VIEWS:
        measured = samples.bandwidth_mbs if metric == "bandwidth" else samples.latency_us
        name_of = link_name if metric == "bandwidth" else pair_name
        end = {"sends": 0, "receives": 1}.get(direction or "")  # None: either end
        names, own, apart = set(), [], {}
        for pair, values in sorted(measured.items()):
            first = hosts[pair[0]]
            if node not in pair:
                group = f"{first} {'sends' if direction else 'pairs'}"
                apart.setdefault(group, ((first,), None, []))[2].extend(values)
            elif end is None or pair[end] == node:
                names.add(name_of(first, hosts[pair[1]]))
                own.extend(values)
        views.append(_NodeView(metric, direction, frozenset(names), own, apart))
    return views


def _judge_nodes(samples: LinkSamples, links: list[Named]) -> list[Named]:
    """The nodes all of whose links of one kind stand out (what it sends, receives, its
    pairs), judged against the links between the other nodes: a slow node's own links
    must not be in the reference it is judged by, nor other nodes' links to it."""
    named_links = {(n.metric, n.finding.name) for n in links}
    found = []
    for node, host in enumerate(samples.hosts):
        for view in _node_views(samples, node):
            if not view.names or not all((view.metric, n) in named_links for n in view.names):
                continue
            name = f"{host} {view.direction}" if view.direction else host
            units = {**view.apart, name: ((host,), view.direction, view.samples)}
            judged = _judge(units, view.metric, "node", "links between the other nodes")
            found += [n for n in judged if n.finding.name == name]
    return sorted(found, key=lambda n: (n.metric, -abs(n.finding.excess)))


def judge_links(samples: LinkSamples) -> LinkMap:
    """The links slower than the other links of one of their ends, and the nodes all of
    whose links of one kind are, against the links between the other nodes
    (diagnosis.outliers.stand_out); bandwidth before latency, links before nodes. Fewer
    than FEWEST_TO_JUDGE repetitions name nothing: a lone sample has no spread to judge."""
    if samples.settings.repetitions < FEWEST_TO_JUDGE:
        return LinkMap(samples, ())
    links = _strongest(
        [
            named
            for metric, among, units in _link_groups(samples)
            for named in _judge(units, metric, "link", among)
        ]
    )
    return LinkMap(samples, (*links, *_judge_nodes(samples, links)))


# --- the printed report ------------------------------------------------------------------

_UNITS = {"bandwidth": "MB/s", "latency": "us"}


def _matrix_lines(hosts: tuple[str, ...], matrix: list[list[float | None]]) -> list[str]:
    width = max(10, *(len(h) + 2 for h in hosts))
    head = f"{'#':<{width}}" + "".join(f"{h:>{width}}" for h in hosts)
    rows = [
        f"{host:<{width}}" + "".join(f"{'-' if v is None else f'{v:.2f}':>{width}}" for v in row)
        for host, row in zip(hosts, matrix, strict=True)
    ]
    return [head, *rows]


def _interval(low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return "no interval"
    return f"95% CI {low:.2f}-{high:.2f}"


def _evidence(named: Named, links_named: int | None = None) -> str:
    f, unit = named.finding, _UNITS[named.metric]
    side = "below the peers' 5th percentile" if named.metric == "bandwidth" else "above their 95th"
    beyond = round(f.share * f.samples)
    text = (
        f"{named.metric} {f.name}: {f.median:.2f} {unit}, peers ({named.among}) "
        f"{f.peers:.2f} {unit}, ratio {f.ratio:.2f} ({_interval(*f.ratio_ci)}), "
        f"{beyond} of {f.samples} samples {side}"
    )
    if links_named is not None:
        text += f"; {links_named} of its links named above"
    return text


def _links_of(node: Named, links: list[Named]) -> int:
    """How many of the named links of the same metric this node is on (in the same
    direction, for bandwidth)."""
    host = node.nodes[0]
    position = {"sends": 0, "receives": 1}.get(node.direction or "")
    return sum(
        1
        for link in links
        if link.metric == node.metric
        and (host in link.nodes if position is None else link.nodes[position] == host)
    )


def linkmap_header(samples: LinkSamples, nprocs: int) -> list[str]:
    """What was measured, and how: the '#' lines above the matrices."""
    settings, hosts = samples.settings, samples.hosts
    steps = round_robin(len(hosts))
    lines = [
        f"# osu-dl-bench linkmap v{__version__}: {len(hosts)} nodes, ranks "
        f"{' '.join(map(str, samples.leaders))} of {nprocs} measuring for them",
        f"# Round-robin: {_count(len(steps), 'step')} per cycle, up to "
        f"{_count(len(hosts) // 2, 'pair')} at once; {_count(settings.repetitions, 'cycle')}, "
        f"one sample per link each; latency: median of {LATENCY_ITERATIONS} ping-pongs; "
        f"bandwidth: {_count(settings.windows, 'window')} (after {settings.warmup_windows} "
        "untimed) each way",
    ]
    if settings.repetitions < FEWEST_FOR_AN_INTERVAL:
        lines.append(
            f"# Note: from fewer than {FEWEST_FOR_AN_INTERVAL} samples no interval of a "
            "median reaches 95% (at 5, even [min, max] covers 93.8%): the bootstrap "
            "intervals below run narrow; more --repetitions widen the evidence"
            + (
                f"; below {FEWEST_TO_JUDGE} nothing is judged"
                if settings.repetitions < FEWEST_TO_JUDGE
                else ""
            )
        )
    return lines


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def report_lines(linkmap: LinkMap) -> list[str]:
    """The matrices, then one line per named link and node with its evidence (or that
    none stands out)."""
    samples, settings = linkmap.samples, linkmap.samples.settings
    hosts = samples.hosts
    window = settings.message_bytes * BW_WINDOW
    lines = [
        f"# Latency (us, one way, {LATENCY_BYTES} B ping-pong; "
        f"median of {settings.repetitions} cycles)",
        *_matrix_lines(hosts, latency_matrix(samples)),
        f"# Bandwidth (MB/s, row sends to column; windows of {BW_WINDOW} x "
        f"{format_size(settings.message_bytes)} = {format_size(window)}; "
        f"median of {settings.repetitions} cycles)",
        *_matrix_lines(hosts, bandwidth_matrix(samples)),
        "# Links that stand out (each against the other links of one of its ends, 95% intervals)",
    ]
    links = linkmap.named("link")
    alone = " (two nodes: the link has no peers, read its rate above)" if len(hosts) == 2 else ""
    lines += [_evidence(n) for n in links] or [f"no link stands out{alone}"]
    lines.append("# Nodes that stand out (each node's links against the links between the others)")
    nodes = linkmap.named("node")
    lines += [_evidence(n, _links_of(n, links)) for n in nodes] or ["no node stands out"]
    return lines


# --- the record -----------------------------------------------------------------------------


def _number(value: float | None) -> float | None:
    """JSON has no NaN: None in its place."""
    return None if value is None or not math.isfinite(value) else float(value)


def _summary(values: Sequence[float]) -> dict[str, object]:
    return {
        "median": _number(float(np.median(values))) if len(values) else None,
        "min": _number(min(values)) if len(values) else None,
        "max": _number(max(values)) if len(values) else None,
        "samples": [_number(v) for v in values],
    }


def _finding_record(named: Named) -> dict[str, object]:
    f = asdict(named.finding)
    for key in ("median", "peers", "ratio", "excess", "share"):
        f[key] = _number(f[key])
    for key in ("ratio_ci", "excess_ci"):
        f[key] = [_number(v) for v in f[key]]
    return {
        "metric": named.metric,
        "unit": named.unit,
        "name": named.finding.name,
        "nodes": list(named.nodes),
        "direction": named.direction,
        "among": named.among,
        **{k: v for k, v in f.items() if k != "name"},
    }


def _matrix_record(matrix: list[list[float | None]]) -> list[list[float | None]]:
    return [[_number(v) for v in row] for row in matrix]


def linkmap_record(linkmap: LinkMap, metadata: Mapping[str, str]) -> dict[str, object]:
    """The machine-readable record (the format in this module's docstring)."""
    samples = linkmap.samples
    hosts = samples.hosts
    return {
        "kind": KIND,
        "format": FORMAT,
        "hosts": list(hosts),
        "leaders": list(samples.leaders),
        "settings": samples.settings.as_dict(),
        "latency_us": _matrix_record(latency_matrix(samples)),
        "bandwidth_mbs": _matrix_record(bandwidth_matrix(samples)),
        "pairs": [
            {"nodes": [hosts[a], hosts[b]], "latency_us": _summary(values)}
            for (a, b), values in sorted(samples.latency_us.items())
        ],
        "links": [
            {"source": hosts[s], "target": hosts[t], "bandwidth_mbs": _summary(values)}
            for (s, t), values in sorted(samples.bandwidth_mbs.items())
        ],
        "findings": [_finding_record(n) for n in linkmap.findings],
        "metadata": dict(metadata),
    }


def write_linkmap(path: str, record: Mapping[str, object]) -> None:
    """Write the record atomically; UsageError saying why where it cannot be written."""
    text = json.dumps(record, indent=1, allow_nan=False) + "\n"
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"-o {path}: cannot write ({os_reason(exc)})") from None


# --- reading the record back (triage) -------------------------------------------------------

# Far above any real cluster's node count and cycle count: a record claiming more is not
# one bench wrote, and reading it must not build matrices of its size.
MOST_NODES = 4096
MOST_SAMPLES = 100_000


def is_linkmap_record(document: object) -> bool:
    """Whether a parsed JSON document says it is a linkmap record."""
    return isinstance(document, dict) and document.get("kind") == KIND


def samples_from_record(record: Mapping[str, object]) -> LinkSamples:
    """The samples a linkmap record (``linkmap_record``) holds, to judge and report again;
    ValueError saying what is not as bench linkmap -o writes it."""
    if record.get("format") != FORMAT:
        raise ValueError(f"format {record.get('format')!r}, expected {FORMAT}")
    hosts = _list_of(record, "hosts", str, MOST_NODES)
    if len(set(hosts)) != len(hosts):
        raise ValueError("hosts names a node twice")
    leaders = _list_of(record, "leaders", int, MOST_NODES)
    if len(leaders) != len(hosts):
        raise ValueError(f"{len(leaders)} leaders for {len(hosts)} hosts")
    settings = record.get("settings")
    if not isinstance(settings, dict):
        raise ValueError("settings is not an object")
    known = {
        name: _whole(settings.get(name), f"settings.{name}", 0 if "warmup" in name else 1)
        for name in ("message_bytes", "windows", "warmup_windows", "repetitions")
    }
    index = {host: i for i, host in enumerate(hosts)}
    latency = _record_samples(record, "pairs", ("nodes",), "latency_us", index)
    bandwidth = _record_samples(record, "links", ("source", "target"), "bandwidth_mbs", index)
    return LinkSamples(tuple(hosts), tuple(leaders), LinkSettings(**known), latency, bandwidth)


def _list_of(record: Mapping[str, object], name: str, kind: type, most: int) -> list:
    values = record.get(name)
    if not isinstance(values, list) or len(values) > most:
        raise ValueError(f"{name} is not a list of at most {most}")
    if not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{name} holds something other than a {kind.__name__}")
    return values


def _whole(value: object, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value < 1 << 40:
        raise ValueError(f"{name} is {value!r:.30}, expected a whole number from {least}")
    return value


def _record_samples(
    record: Mapping[str, object],
    name: str,
    ends: tuple[str, ...],
    metric: str,
    index: Mapping[str, int],
) -> dict[tuple[int, int], tuple[float, ...]]:
    """``record[name]``'s samples by pair of node indices (nulls, values JSON could not
    hold, left out as the writer left them)."""
    found = {}
    for entry in _list_of(record, name, dict, MOST_NODES * MOST_NODES):
        nodes = entry.get(ends[0]) if len(ends) == 1 else [entry.get(end) for end in ends]
        if not (isinstance(nodes, list) and len(nodes) == 2 and all(n in index for n in nodes)):
            raise ValueError(f"{name} names a pair of nodes that hosts does not hold")
        summary = entry.get(metric)
        samples = summary.get("samples") if isinstance(summary, dict) else None
        if not isinstance(samples, list) or len(samples) > MOST_SAMPLES:
            raise ValueError(f"{name}: {metric} has no list of samples")
        values = [v for v in samples if v is not None]
        if not all(_positive_number(v) for v in values):
            raise ValueError(f"{name}: {metric} holds a sample that is no positive number")
        if values:
            found[(index[nodes[0]], index[nodes[1]])] = tuple(float(v) for v in values)
    return found


def _positive_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e300
