"""Prediction against measurement for every (collective, algorithm, size, p) of a sweep,
with the oracle paper's metric (Kahira et al., HPDC 2021): accuracy = 1 - |pred - meas| /
meas, averaged without clipping (a prediction 3x too high scores -2, as the formula says).

The measurement of a point is the median over the sweep's launches of each launch's
median (model.measured); its prediction the median over the same launches of the
platform's prediction scaled to the launch's machine state (model.state, the scaling the
platform was fitted with). Beside each figure stands its ceiling: the same metric with
the median over the odd launches as the prediction of the median over the even ones (how
well the measurement predicts itself; a sweep of one launch has none).

Messages of at least LARGE_BYTES (64 KiB) are reported apart from smaller ones, whose time
is mostly per-call software overhead and, on oversubscribed runs, scheduling. Variants the
model has no formula for (gloo; native where MPICH's choice has no registered twin) are
listed as not modelled and left out of the averages (and of the ceiling's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from collectives.units import format_size
from osu_dl_bench.model import measured
from osu_dl_bench.model.corrections import formula_parts
from osu_dl_bench.model.platform import Platform
from osu_dl_bench.model.state import state_factors
from osu_dl_bench.paths import write_atomic
from osu_dl_bench.plotting import pyplot

LARGE_BYTES = 64 << 10
POINT = list(measured.POINT)


def load_measurements(source: str | Path) -> pd.DataFrame:
    """A sweep's clean rows, one per (point, algorithm, launch): a run directory (its
    results.csv) or a results CSV itself."""
    return measured.load_rows(source)


def _predicted_rows(platform: Platform, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``pred_us``: the corrected formula, scaled to each row's state."""
    unique = rows.drop_duplicates(POINT)[POINT]
    parts = formula_parts(platform, unique)
    factors = np.array(
        [
            platform.correction(r.collective, r.algorithm, r.nprocs, r.nodes, r.size_bytes)
            for r in parts.itertuples(index=False)
        ],
        float,
    ).reshape(-1, 2)
    parts["base_us"] = factors[:, 0] * parts["latency_us"] + factors[:, 1] * parts["bandwidth_us"]
    out = rows.merge(parts, on=POINT, how="left")
    out["pred_us"] = out["base_us"] * state_factors(out, platform, platform.state_scaling)
    return out


def _accuracy(pred: pd.Series, meas: pd.Series) -> pd.Series:
    return 1 - (pred - meas).abs() / meas


def compare(platform: Platform, frame: pd.DataFrame) -> pd.DataFrame:
    """Per point and algorithm: ``median_us`` (the median over launches), ``pred_us`` (the
    median over launches of the scaled prediction), ``accuracy`` (NaN where not
    modelled) and ``large``. ``frame``: rows as load_measurements gives them, or any
    frame with a sweep's key columns and median_us (one launch)."""
    rows = measured.model_rows(frame)
    predicted = _predicted_rows(platform, rows)
    out = predicted.groupby(POINT, as_index=False, sort=True).agg(
        median_us=("median_us", "median"), pred_us=("pred_us", "median")
    )
    out["pred_us"] = out["pred_us"].astype(float)
    out["accuracy"] = _accuracy(out["pred_us"], out["median_us"])
    out["large"] = out["size_bytes"] >= LARGE_BYTES
    return out


def ceiling(frame: pd.DataFrame, result: pd.DataFrame | None = None) -> pd.DataFrame | None:
    """Per point and algorithm: the odd launches' median as the prediction of the even
    launches' (``accuracy``), and ``large``; only the points ``result`` models (all if
    None). None for a sweep of one launch."""
    rows = measured.model_rows(frame)
    if measured.launch_count(rows) < 2:
        return None
    both = measured.halves(rows)
    if result is not None:
        modelled = result.dropna(subset=["accuracy"])[POINT]
        both = both.merge(modelled, on=POINT, how="inner")
    both["accuracy"] = _accuracy(both["odd_us"], both["even_us"])
    both["large"] = both["size_bytes"] >= LARGE_BYTES
    return both


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


def _means(rows: pd.DataFrame | None, collective: str, p: int) -> tuple[float, float]:
    """Mean accuracy of one collective and p: >= 64 KiB, smaller (NaN where none)."""
    if rows is None:
        return np.nan, np.nan
    mine = rows[(rows["collective"] == collective) & (rows["nprocs"] == p)]
    return mine.loc[mine["large"], "accuracy"].mean(), mine.loc[~mine["large"], "accuracy"].mean()


def _by_p(ok: pd.DataFrame, ceiling_rows: pd.DataFrame | None) -> list[str]:
    lines = [
        f"{'collective':<12}{'p':>3}  {'>=64KiB %':>10}{'ceiling':>9}{'n':>5}  "
        f"{'<64KiB %':>9}{'ceiling':>9}{'n':>5}"
    ]
    for (collective, p), rows in ok.groupby(["collective", "nprocs"]):
        big, small = rows[rows["large"]], rows[~rows["large"]]
        big_ceiling, small_ceiling = _means(ceiling_rows, collective, p)
        lines.append(
            f"{collective:<12}{p:>3}  {_pct(big['accuracy'].mean()):>10}{_pct(big_ceiling):>9}"
            f"{len(big):>5}  {_pct(small['accuracy'].mean()):>9}{_pct(small_ceiling):>9}"
            f"{len(small):>5}"
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


def _with_ceiling(value: float, ceiling_rows: pd.DataFrame | None, which) -> str:
    """'72.29% (ceiling 95.10%)', or the ceiling marked n/a for a sweep of one launch."""
    if ceiling_rows is None:
        return f"{_pct(value).strip()}% (ceiling: n/a (one launch))"
    return f"{_pct(value).strip()}% (ceiling {_pct(which(ceiling_rows)).strip()}%)"


def _large(rows: pd.DataFrame) -> float:
    return rows.loc[rows["large"], "accuracy"].mean()


def _small(rows: pd.DataFrame) -> float:
    return rows.loc[~rows["large"], "accuracy"].mean()


def _overall(rows: pd.DataFrame) -> float:
    return rows["accuracy"].mean()


def _header(platform: Platform, summary: Summary, skipped: list[str], launches: str) -> list[str]:
    corrected = {c.key for c in platform.corrections}
    return [
        f"# platform: {platform.name} ({platform.path}); {platform.source}",
        f"# corrections: {len(corrected)} variant layouts; state scaling: {platform.state_scaling}",
        "# accuracy = 1 - |predicted - measured| / measured (Kahira et al., HPDC 2021), mean; "
        "ceiling: the same, odd launches' medians predicting even launches'",
        f"# measured: {launches}",
        f"# modelled points {summary.modelled}; not modelled {summary.unmodelled}: "
        f"{', '.join(skipped) or 'none'}",
    ]


def report(
    result: pd.DataFrame,
    platform: Platform,
    ceiling_rows: pd.DataFrame | None = None,
    launches: str = "",
) -> str:
    """The accuracy report, each figure beside its ceiling (``ceiling``'s rows; None: a
    sweep of one launch); its last line is the average accuracy (>= 64 KiB)."""
    ok = result.dropna(subset=["accuracy"])
    summary = summarize(result)
    skipped = sorted(set(result.loc[result["accuracy"].isna(), "algorithm"]))
    size = format_size(LARGE_BYTES)
    lines = [
        *_header(platform, summary, skipped, launches),
        "",
        "## by collective and process count (ceiling: how well the sweep predicts itself)",
        *_by_p(ok, ceiling_rows),
        "",
        "## by algorithm, messages >= 64 KiB",
        *_by_algorithm(ok),
        "",
        "## worst, messages >= 64 KiB (median predicted / measured)",
        *_worst(ok),
        "",
        f"average accuracy, messages < {size}: "
        + _with_ceiling(summary.small, ceiling_rows, _small),
        "average accuracy, all sizes: " + _with_ceiling(summary.overall, ceiling_rows, _overall),
        f"average accuracy (messages >= {size}): "
        + _with_ceiling(summary.large, ceiling_rows, _large),
    ]
    return "\n".join(lines) + "\n"


def plot(result: pd.DataFrame, path: Path) -> Path:
    """Predicted against measured, log-log, one colour per process count."""
    plt = pyplot("model accuracy")
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
    write_atomic(Path(path), lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
    return path
