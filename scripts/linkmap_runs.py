"""Tally bench linkmap runs (their -o records; see osu_dl_bench/diagnosis/linkmap.py for
the format) for scripts/linkmap_check.sh: the runs with one node shaped slow, each counted
when it names exactly that node's links and the node; the uniform runs, each counted
when it names anything. Each run's line: its wall time (RUN.wall beside the record, when
there), the median bandwidth of the slow node's links and of the others, what it named.
Then the first run of each kind as linkmap printed it (RUN.txt).

    python scripts/linkmap_runs.py --slow node4 --shaped A-*.json --uniform B-*.json
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from osu_dl_bench.jsonfile import load_json  # noqa: E402


def _run_number(path: Path) -> int:
    found = re.search(r"(\d+)$", path.stem)
    return int(found.group(1)) if found else 0


def _wall(path: Path) -> str:
    wall = path.with_suffix(".wall")
    return f"{float(wall.read_text()):.1f}" if wall.exists() else "-"


def _bandwidths(record: dict, slow: str) -> tuple[float, float]:
    """Median MB/s of the slow node's links (both ways) and of the others."""
    touching, others = [], []
    for link in record["links"]:
        median = link["bandwidth_mbs"]["median"]
        (touching if slow in (link["source"], link["target"]) else others).append(median)
    return (
        statistics.median(touching) if touching else float("nan"),
        statistics.median(others) if others else float("nan"),
    )


def _named(record: dict) -> tuple[list[dict], list[dict]]:
    links = [f for f in record["findings"] if f["unit"] == "link"]
    nodes = [f for f in record["findings"] if f["unit"] == "node"]
    return links, nodes


def _exact(record: dict, slow: str) -> bool:
    """Every named link touches the slow node, bandwidth names all of its links both
    ways, and the nodes named are the slow one alone, by what it sends and receives."""
    links, nodes = _named(record)
    hosts = record["hosts"]
    expected = {f"{slow}->{h}" for h in hosts if h != slow} | {
        f"{h}->{slow}" for h in hosts if h != slow
    }
    bandwidth = {f["name"] for f in links if f["metric"] == "bandwidth"}
    return (
        all(slow in f["nodes"] for f in links)
        and bandwidth == expected
        and {tuple(f["nodes"]) for f in nodes} == {(slow,)}
        and {f["direction"] for f in nodes if f["metric"] == "bandwidth"} == {"sends", "receives"}
    )


def _describe(findings: list[dict]) -> str:
    return " ".join(sorted(f["name"].replace(" ", ":") for f in findings)) or "-"


def _table(paths: list[Path], slow: str) -> list[dict]:
    rows = []
    print(f"{'run':>4} {'wall_s':>7} {slow + '_MBps':>11} {'other_MBps':>10}  links / nodes named")
    for path in paths:
        record = load_json(path)
        links, nodes = _named(record)
        touching, others = _bandwidths(record, slow)
        print(
            f"{_run_number(path):>4} {_wall(path):>7} {touching:>11.2f} {others:>10.2f}  "
            f"{len(links)}: {_describe(links)} / {_describe(nodes)}"
        )
        rows.append({"record": record, "links": links, "nodes": nodes})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the tallies; exit 0 (the counts are the result, not a verdict)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", required=True, help="the node shaped slow, e.g. node4")
    parser.add_argument("--shaped", nargs="+", type=Path, default=[])
    parser.add_argument("--uniform", nargs="+", type=Path, default=[])
    args = parser.parse_args(argv)
    shaped = sorted(args.shaped, key=_run_number)
    uniform = sorted(args.uniform, key=_run_number)

    print(f"## {args.slow} shaped slow: {len(shaped)} runs")
    rows = _table(shaped, args.slow)
    slow, count = args.slow, len(rows)
    exact = sum(_exact(row["record"], slow) for row in rows)
    node = sum(any(slow in f["nodes"] for f in row["nodes"]) for row in rows)
    stray = sum(any(slow not in f["nodes"] for f in row["links"] + row["nodes"]) for row in rows)
    print(f"# named exactly {slow}'s links (both ways) and {slow}: {exact} of {count} runs")
    print(
        f"# named {slow}: {node} of {count} runs; named a link or node apart from {slow}: "
        f"{stray} of {count}"
    )

    print(f"## uniform: {len(uniform)} runs")
    rows = _table(uniform, args.slow)
    loud = sum(bool(row["links"] or row["nodes"]) for row in rows)
    links, nodes = sum(bool(r["links"]) for r in rows), sum(bool(r["nodes"]) for r in rows)
    print(f"# named anything: {loud} of {len(rows)} runs (a link in {links}, a node in {nodes})")

    for label, paths in (("shaped", shaped), ("uniform", uniform)):
        text = paths[0].with_suffix(".txt") if paths else None
        if text is not None and text.exists():
            print(f"## the first {label} run as linkmap printed it ({text})")
            print(text.read_text().rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
