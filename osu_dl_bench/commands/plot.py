"""``osu-dl-bench plot RUN_DIR``: PNGs of a sweep and its tuning table (matplotlib, Agg: the
``plot`` extra).

Per (collective, buffer kind, job shape): latency against size for every algorithm
(log-log, median with the q1..q3 band) with the tuned choice drawn as a wide band and a
strip of its ranges; bus bandwidth against size. Per (collective, buffer kind): speedup of
the tuned choice over native against size, one line per job shape; a heatmap of the
chosen algorithm over size x process count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from collectives.units import format_size
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.paths import check_writable_directory, write_atomic
from osu_dl_bench.plotting import pyplot

if TYPE_CHECKING:  # imported in the functions: tuning loads mpi4py.MPI, parsing must not
    from osu_dl_bench.selection.table import Entry, TuningTable

CHOICE_BAND = "#f2b705"


@dataclass(frozen=True)
class PlotConfig:
    """The run to plot, its tuning table (None: tune it now) and where the PNGs go."""

    run_dir: str
    table: str | None
    output: str | None


def _size_axis(ax, sizes, log_y: bool = True) -> None:
    """Log-2 size axis over the measured sizes, at most a dozen power-of-two ticks."""
    from matplotlib.ticker import NullLocator

    lo, hi = max(int(min(sizes)), 1), max(int(max(sizes)), 1)
    first, last = lo.bit_length() - 1, (hi - 1).bit_length()
    step = max(1, -(-(last - first) // 12))
    ticks = [1 << k for k in range(first, last + 1, step)]
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlim(lo / 1.4, hi * 1.4)
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(t) for t in ticks], rotation=45)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(True, which="major", alpha=0.3)


def _colors(labels: list[str]) -> dict[str, tuple]:
    """One stable color per algorithm label."""
    import matplotlib

    cmap = matplotlib.colormaps["tab20" if len(labels) > 10 else "tab10"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(sorted(labels))}


def _chosen_path(entry: Entry) -> tuple[list[int], list[float]]:
    points = [p for p in entry.points if p.get("median_us") is not None]
    return [p["size_bytes"] for p in points], [p["median_us"] for p in points]


def _range_strip(ax, entry: Entry, colors: dict[str, tuple], sizes) -> None:
    """A strip along the bottom: the algorithm the table picks over each size range."""
    lo_size, hi_size = max(int(min(sizes)), 1) / 1.4, int(max(sizes)) * 1.4
    for r in entry.ranges:
        lo, hi = max(r.min_bytes, lo_size), min(r.max_bytes or hi_size, hi_size)
        if lo < hi:
            color = colors.get(r.choice.label, "lightgray")
            ax.axvspan(lo, hi, ymin=0, ymax=0.035, color=color, alpha=0.9, lw=0)
    ax.text(0.005, 0.045, "table ranges", transform=ax.transAxes, fontsize=7, va="bottom")


def _latency(plt, rows: pd.DataFrame, entry: Entry | None, colors, title: str, path: Path):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, algo in rows.groupby("algorithm"):
        algo = algo.sort_values("size_bytes")
        ax.plot(
            algo["size_bytes"],
            algo["median_us"],
            marker="o",
            ms=3,
            label=label,
            color=colors[label],
        )
        ax.fill_between(
            algo["size_bytes"], algo["q1_us"], algo["q3_us"], alpha=0.2, color=colors[label], lw=0
        )
    if entry is not None:
        sizes, medians = _chosen_path(entry)
        ax.plot(sizes, medians, color=CHOICE_BAND, lw=9, alpha=0.35, zorder=0, label="tuned choice")
        _range_strip(ax, entry, colors, rows["size_bytes"])
    _size_axis(ax, rows["size_bytes"])
    ax.set(xlabel="message size (bytes)", ylabel="latency (us, median; band q1..q3)", title=title)
    ax.legend(fontsize=8, ncol=2)
    _save(plt, fig, path)


def _shown_labels(points: list) -> list[str]:
    """The candidates worth a curve: each point's choice and best, and native."""
    labels = {"native"} | {p.chosen for p in points} | {p.best for p in points}
    return sorted(labels)


def _ratios(
    plt, points: list, entry: Entry | None, colors, title: str, path: Path, nulls: list = ()
):
    """Each chosen or best candidate's time over native against size, as the decisions
    estimate it (smoothed over sizes, with the run's pooled launch variance): the line
    and its 95% band, under the table's ranges; the null controls (native again, by the
    same estimator) dashed in black, the noise the candidates' lines are read against."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    shown = [
        p.candidates[label].ratio.ratio
        for p in points
        for label in _shown_labels(points)
        if label in p.candidates
    ]
    for null in nulls:
        _null_line(ax, null, shown)
    for label in _shown_labels(points):
        found = [(p.size, p.candidates[label].ratio) for p in points if label in p.candidates]
        if not found:
            continue
        sizes = [size for size, _ in found]
        ax.plot(
            sizes,
            [r.ratio for _, r in found],
            marker="o",
            ms=3,
            label=label,
            color=colors.get(label, "gray"),
        )
        ax.fill_between(
            sizes,
            [r.low for _, r in found],
            [r.high for _, r in found],
            alpha=0.2,
            color=colors.get(label, "gray"),
            lw=0,
        )
    sizes = [p.size for p in points]
    if entry is not None:
        _range_strip(ax, entry, colors, sizes)
    _size_axis(ax, sizes)
    ax.set(xlabel="message size (bytes)", ylabel="time / native's (95% band)", title=title)
    ax.legend(fontsize=8, ncol=2)
    _save(plt, fig, path)


# The null control's band is drawn within this factor of the plotted estimates: an
# interval of 0.001-10000 (one launch, few rounds) would squash every curve.
NULL_BAND_REACH = 2.0


def _null_line(ax, null, shown: Sequence[float] = ()) -> None:
    """One null control's ratio to native and its 95% band (selection.null_control),
    the band clipped to NULL_BAND_REACH of the estimates drawn (``shown``: the
    candidates'; the null's own count too)."""
    sizes = [p.size for p in null.points]
    estimates = [p.ratio.ratio for p in null.points]
    ax.plot(
        sizes,
        estimates,
        ls="--",
        marker=".",
        color="black",
        label=f"{null.label} (null control: {null.wins} of {len(null.points)} chosen)",
    )
    drawn = [r for r in (*shown, *estimates) if math.isfinite(r) and r > 0] or [1.0]
    floor, ceiling = min(drawn) / NULL_BAND_REACH, max(drawn) * NULL_BAND_REACH
    lows = np.clip([p.ratio.low for p in null.points], floor, ceiling)
    highs = np.clip([p.ratio.high for p in null.points], floor, ceiling)
    ax.fill_between(sizes, lows, highs, alpha=0.1, color="black")


def _busbw(plt, rows: pd.DataFrame, colors, title: str, path: Path):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, algo in rows.groupby("algorithm"):
        algo = algo.sort_values("size_bytes")
        ax.plot(
            algo["size_bytes"],
            algo["busbw_gbs"],
            marker="o",
            ms=3,
            label=label,
            color=colors[label],
        )
    _size_axis(ax, rows["size_bytes"], log_y=False)
    ax.set(xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)", title=title)
    ax.legend(fontsize=8, ncol=2)
    _save(plt, fig, path)


def _speedup(plt, entries: list[Entry], title: str, path: Path):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for entry in entries:
        points = [p for p in entry.points if p.get("speedup")]
        if points:
            k = entry.key
            ax.plot(
                [p["size_bytes"] for p in points],
                [p["speedup"] for p in points],
                marker="o",
                ms=3,
                label=f"p={k.nprocs} ({k.nodes}x{k.ppn})",
            )
            banded = [p for p in points if p.get("ratio_low") and p.get("ratio_high")]
            ax.fill_between(
                [p["size_bytes"] for p in banded],
                [1 / p["ratio_high"] for p in banded],
                [1 / p["ratio_low"] for p in banded],
                alpha=0.2,
                lw=0,
            )
    ax.axhline(1.0, color="black", lw=1, ls="--")
    _size_axis(ax, [p["size_bytes"] for e in entries for p in e.points], log_y=False)
    ax.set(xlabel="message size (bytes)", ylabel="speedup over native (95% band)", title=title)
    ax.legend(fontsize=8)
    _save(plt, fig, path)


def _winners(plt, entries: list[Entry], colors, title: str, path: Path):
    """Chosen algorithm per (process count, size) as colored cells with speedup text."""
    from matplotlib.patches import Patch

    sizes = sorted({p["size_bytes"] for e in entries for p in e.points})
    fig, ax = plt.subplots(figsize=(max(6, 0.55 * len(sizes) + 3), 1.0 * len(entries) + 2.5))
    used = set()
    for row, entry in enumerate(entries):
        for point in entry.points:
            col = sizes.index(point["size_bytes"])
            used.add(point["chosen"])
            ax.add_patch(plt.Rectangle((col, row), 1, 1, color=colors[point["chosen"]]))
            if point.get("speedup"):
                ax.text(
                    col + 0.5,
                    row + 0.5,
                    f"{point['speedup']:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                )
    ax.set_xlim(0, len(sizes))
    ax.set_ylim(0, len(entries))
    ax.set_xticks([i + 0.5 for i in range(len(sizes))])
    ax.set_xticklabels([format_size(s) for s in sizes], rotation=60, fontsize=7)
    ax.set_yticks([i + 0.5 for i in range(len(entries))])
    ax.set_yticklabels([f"p={e.key.nprocs} ({e.key.nodes}x{e.key.ppn})" for e in entries])
    ax.set(xlabel="message size (bytes); cell text: speedup over native", title=title)
    handles = [Patch(color=colors[label], label=label) for label in sorted(used)]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    _save(plt, fig, path)


def _save(plt, fig, path: Path) -> None:
    fig.tight_layout()
    write_atomic(Path(path), lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)


def _table_for(run_dir: str, table_path: str | None) -> TuningTable:
    from osu_dl_bench.selection.table import load_table
    from osu_dl_bench.selection.tune import build_table

    if table_path:
        return load_table(table_path)
    table, _ = build_table(run_dir, Path(run_dir).name)
    return table


_POINT_ROW = ["collective", "device", "nodes", "ppn", "nprocs", "algorithm", "size_bytes"]


def over_launches(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate and size: the medians over launches of its rows as the tuner
    reads them (selection.tune.clean_rows: its own group, the last row of each launch)."""
    from osu_dl_bench.selection.paired import point_latency
    from osu_dl_bench.selection.tune import clean_rows

    stats = {
        "median_us": point_latency,
        "q1_us": "median",
        "q3_us": "median",
        "busbw_gbs": "median",
    }
    return clean_rows(rows).groupby(_POINT_ROW, as_index=False).agg(stats)


def plot_run(run_dir: str, table_path: str | None = None, out_dir: str | None = None) -> list:
    """Write every plot of a run directory; returns the PNG paths."""
    from osu_dl_bench.selection.table import EntryKey
    from osu_dl_bench.selection.tune import run_decisions, run_nulls, select_rows

    plt = pyplot("plot")
    rows, _, _ = select_rows(RunStore(run_dir).load(), None, None)
    rows = over_launches(rows)
    table = _table_for(run_dir, table_path)
    target = Path(out_dir or Path(run_dir) / "plots")
    target.mkdir(parents=True, exist_ok=True)
    colors = _colors(sorted(set(rows["algorithm"]) | _table_labels(table)))
    entries = {e.key: e for e in table.entries}
    decided: dict = {}
    for (key, _), point in sorted(run_decisions(run_dir)[0].items(), key=lambda i: i[0][1]):
        decided.setdefault(key, []).append(point)
    nulls: dict = {}
    for figures in run_nulls(run_dir):
        nulls.setdefault(figures.key, []).append(figures)
    written = []
    for (coll, dev, nodes, ppn, p), shape in rows.groupby(
        ["collective", "device", "nodes", "ppn", "nprocs"]
    ):
        entry = entries.get(EntryKey(str(coll), str(dev), int(nodes), int(ppn), int(p)))
        stem = f"{coll}_{dev}_p{p}_{nodes}x{ppn}"
        title = f"{coll}, {dev}, p={p} ({nodes} node{'' if nodes == 1 else 's'} x {ppn} ppn)"
        written.append(target / f"{stem}_latency.png")
        _latency(plt, shape, entry, colors, title, written[-1])
        written.append(target / f"{stem}_busbw.png")
        _busbw(plt, shape, colors, title, written[-1])
        key = EntryKey(str(coll), str(dev), int(nodes), int(ppn), int(p))
        points = decided.get(key)
        if points:
            written.append(target / f"{stem}_ratios.png")
            _ratios(plt, points, entry, colors, title, written[-1], nulls.get(key, []))
    for (coll, dev), group in _by_collective(table).items():
        written.append(target / f"{coll}_{dev}_speedup.png")
        _speedup(plt, group, f"{coll}, {dev}: speedup of the tuned choice", written[-1])
        written.append(target / f"{coll}_{dev}_winners.png")
        _winners(plt, group, colors, f"{coll}, {dev}: chosen algorithm", written[-1])
    return written


def _table_labels(table: TuningTable) -> set[str]:
    return {p["chosen"] for e in table.entries for p in e.points} | {
        r.choice.label for e in table.entries for r in e.ranges
    }


def _by_collective(table: TuningTable) -> dict[tuple[str, str], list[Entry]]:
    """Entries with per-size evidence, grouped by collective and buffer kind."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for entry in sorted(table.entries, key=lambda e: (e.key.nprocs, e.key.nodes)):
        if entry.points:
            groups.setdefault((entry.key.collective, entry.key.device), []).append(entry)
    return groups


def run_plot(cfg: PlotConfig) -> int:
    """The plot subcommand: write the PNGs and list them."""
    check_writable_directory("-o", cfg.output or str(Path(cfg.run_dir) / "plots"))
    for path in plot_run(cfg.run_dir, cfg.table, cfg.output):
        print(f"# wrote {path}")
    return 0
