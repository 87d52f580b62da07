"""Prediction against measurement for every (collective, algorithm, size, p) of a sweep,
with the oracle paper's metric (Kahira et al., HPDC 2021): accuracy = 1 - |pred - meas| /
meas, averaged without clipping (a prediction 3x too high scores -2, as the formula says).

Messages of at least LARGE_BYTES (64 KiB) are reported apart from smaller ones, whose time
is mostly per-call software overhead and, on oversubscribed runs, scheduling. Variants the
model has no formula for (gloo; native where MPICH's choice has no registered twin) are
listed as not modelled and left out of the averages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from collectives.registry import parse_variant
from collectives.shape import JobShape
from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.model.costs import predict_seconds
from osu_dl_bench.model.platform import Platform

LARGE_BYTES = 64 << 10
_NEEDED = ("collective", "algorithm", "size_bytes", "nprocs", "nodes", "ppn", "median_us")


def load_measurements(source: str | Path) -> pd.DataFrame:
    """A sweep's results: a run directory (results.csv) or a results CSV itself."""
    path = Path(source)
    csv_path = path / "results.csv" if path.is_dir() else path
    try:
        frame = pd.read_csv(csv_path)
    except (OSError, pd.errors.ParserError) as exc:
        raise UsageError(f"{csv_path}: cannot read sweep results: {exc}") from None
    missing = [c for c in _NEEDED if c not in frame.columns]
    if missing:
        raise UsageError(f"{csv_path}: expected sweep columns {_NEEDED}; missing {missing}")
    if "validation" in frame.columns:
        frame = frame[frame["validation"].fillna("") != "fail"]
    return frame


def _prediction(platform: Platform, row) -> float | None:
    try:
        variant = parse_variant(row.collective, row.algorithm)
    except UsageError:
        return None  # a backend missing here (gloo without torch): not modelled anyway
    layout = JobShape(int(row.nprocs), int(row.nodes), int(row.ppn))
    seconds = predict_seconds(platform, row.collective, variant, layout, int(row.size_bytes))
    return None if seconds is None else seconds * 1e6


def compare(platform: Platform, frame: pd.DataFrame) -> pd.DataFrame:
    """The measurements with ``pred_us`` and ``accuracy`` (NaN where not modelled)."""
    out = frame.loc[:, list(_NEEDED)].copy()
    out["pred_us"] = [_prediction(platform, r) for r in out.itertuples(index=False)]
    out["pred_us"] = out["pred_us"].astype(float)
    out["accuracy"] = 1 - (out["pred_us"] - out["median_us"]).abs() / out["median_us"]
    out["large"] = out["size_bytes"] >= LARGE_BYTES
    return out


@dataclass(frozen=True)
class Summary:
    """Average accuracies of a comparison."""

    large: float
    small: float
    overall: float
    modelled: int
    unmodelled: int


def summarize(result: pd.DataFrame) -> Summary:
    """Means over modelled points: >= 64 KiB, smaller, all."""
    ok = result.dropna(subset=["accuracy"])
    return Summary(
        float(ok.loc[ok["large"], "accuracy"].mean()),
        float(ok.loc[~ok["large"], "accuracy"].mean()),
        float(ok["accuracy"].mean()),
        len(ok),
        int(result["accuracy"].isna().sum()),
    )


def _pct(value: float) -> str:
    return "   -  " if np.isnan(value) else f"{100 * value:6.2f}"


def _by_p(ok: pd.DataFrame) -> list[str]:
    lines = [f"{'collective':<12}{'p':>3}  {'>=64KiB %':>10}{'n':>5}  {'<64KiB %':>9}{'n':>5}"]
    for (collective, p), rows in ok.groupby(["collective", "nprocs"]):
        big, small = rows[rows["large"]], rows[~rows["large"]]
        lines.append(
            f"{collective:<12}{p:>3}  {_pct(big['accuracy'].mean()):>10}{len(big):>5}  "
            f"{_pct(small['accuracy'].mean()):>9}{len(small):>5}"
        )
    return lines


def _by_algorithm(ok: pd.DataFrame) -> list[str]:
    big = ok[ok["large"]]
    table = big.pivot_table(
        index=["collective", "algorithm"], columns="nprocs", values="accuracy", aggfunc="mean"
    )
    ps = list(table.columns)
    lines = [f"{'collective':<12}{'algorithm':<40}" + "".join(f"{'p=' + str(p):>9}" for p in ps)]
    for (collective, algorithm), row in table.iterrows():
        cells = "".join(f"{_pct(row[p]):>9}" for p in ps)
        lines.append(f"{collective:<12}{algorithm:<40}{cells}")
    return lines


def _worst(ok: pd.DataFrame, count: int = 8) -> list[str]:
    """The lowest-scoring (collective, algorithm, p) >= 64 KiB, with the median of
    predicted / measured (above 1: over-predicted)."""
    big = ok[ok["large"]].assign(ratio=ok["pred_us"] / ok["median_us"])
    groups = big.groupby(["collective", "algorithm", "nprocs"])
    table = groups.agg(accuracy=("accuracy", "mean"), ratio=("ratio", "median"))
    lines = [f"{'collective':<12}{'algorithm':<40}{'p':>3}{'accuracy %':>12}{'pred/meas':>11}"]
    for (collective, algorithm, p), row in table.nsmallest(count, "accuracy").iterrows():
        lines.append(
            f"{collective:<12}{algorithm:<40}{p:>3}{_pct(row['accuracy']):>12}{row['ratio']:>11.2f}"
        )
    return lines


def report(result: pd.DataFrame, platform: Platform) -> str:
    """The accuracy report; its last line is the average accuracy (>= 64 KiB)."""
    ok = result.dropna(subset=["accuracy"])
    summary = summarize(result)
    skipped = sorted(set(result.loc[result["accuracy"].isna(), "algorithm"]))
    lines = [
        f"# platform: {platform.name} ({platform.path}); {platform.source}",
        "# accuracy = 1 - |predicted - measured| / measured (Kahira et al., HPDC 2021), mean",
        f"# modelled points {summary.modelled}; not modelled {summary.unmodelled}: "
        f"{', '.join(skipped) or 'none'}",
        "",
        "## by collective and process count",
        *_by_p(ok),
        "",
        "## by algorithm, messages >= 64 KiB",
        *_by_algorithm(ok),
        "",
        "## worst, messages >= 64 KiB (median predicted / measured)",
        *_worst(ok),
        "",
        f"average accuracy, messages < {format_size(LARGE_BYTES)}: {_pct(summary.small).strip()}%",
        f"average accuracy, all sizes: {_pct(summary.overall).strip()}%",
        f"average accuracy (messages >= {format_size(LARGE_BYTES)}): "
        f"{_pct(summary.large).strip()}%",
    ]
    return "\n".join(lines) + "\n"


def plot(result: pd.DataFrame, path: Path) -> Path:
    """Predicted against measured, log-log, one colour per process count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = result.dropna(subset=["accuracy"])
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for p, rows in ok.groupby("nprocs"):
        for large, marker in ((True, "o"), (False, ".")):
            part = rows[rows["large"] == large]
            label = f"p={p}, {'>=' if large else '<'}64 KiB"
            ax.scatter(part["median_us"], part["pred_us"], s=12, marker=marker, label=label)
    lo = max(min(ok["median_us"].min(), ok["pred_us"].min()), 1e-3)
    hi = max(ok["median_us"].max(), ok["pred_us"].max())
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="predicted = measured")
    ax.plot([lo, hi], [0.9 * lo, 0.9 * hi], "k:", lw=0.6, label="+-10%")
    ax.plot([lo, hi], [1.1 * lo, 1.1 * hi], "k:", lw=0.6)
    ax.set(xscale="log", yscale="log", xlabel="measured (us)", ylabel="predicted (us)")
    ax.set_title(f"model vs sweep: mean accuracy {100 * summarize(result).large:.1f}% (>= 64 KiB)")
    ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
