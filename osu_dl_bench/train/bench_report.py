"""What ``train-bench``'s launch records give: the run directory's points (each
configuration's training steps, as a sweep's candidate), the launches as one measurement,
per configuration the median img/s and its ratios against DDP-Gloo and against native with
their intervals, the table and OUT.json.

A ratio is exp(median log-ratio) with a 95% interval (selection/paired.py): within a group
paired round by round in each launch, across groups (tuned against DDP-Gloo) launch k with
launch k on the launches' medians; cluster bootstrap widened to Student's t over the
launches.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osu_dl_bench.jobs.plan import MPI_GROUP
from osu_dl_bench.measurement.store import TRAINING_STEP
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.train.bench_config import TrainBenchConfig, recorded_options
from osu_dl_bench.train.comparison import DDP, GROUPS, NATIVE, TUNED

# --- the run directory: a training step is a point (collective TRAINING_STEP) whose
# candidates are the configurations --------------------------------------------------


def training_points(record: dict[str, Any]) -> list[Any]:
    """One launch's record as run-directory points: per configuration, the time of one
    training step in each round (global batch / img/s), as a sweep's candidate at the
    gradients' size (parameters x 4 B), so merge and the run directory's readers take it."""
    steps: dict[str, list[float]] = {}
    for row in sorted(record["rows"], key=lambda r: r["round"]):
        steps.setdefault(row["config"], []).append(record["global_batch"] / row["img_per_s"])
    return [_step_point(record, label, seconds) for label, seconds in steps.items()]


def _step_point(record: dict[str, Any], label: str, seconds: list[float]) -> Any:
    """One configuration's training steps of one launch as a SweepPoint."""
    from dataclasses import asdict

    import numpy as np

    from collectives.specs import SPECS
    from osu_dl_bench.measurement.schedule import round_stats
    from osu_dl_bench.measurement.store import SweepPoint, format_rounds

    nprocs, size = record["nprocs"], record["parameters"] * 4
    stats = round_stats(np.array(seconds).reshape(-1, 1, 1))[0]
    # The gradients' bytes over a step's time; the bus factor is the allreduce's that
    # carries them.
    algbw = size / (stats.median_us * 1e-6) / 1e9
    return SweepPoint(
        collective=TRAINING_STEP,
        backend=record["configs"].get(label, MPI_GROUP),
        algorithm=label,
        dtype="float32",
        op="sum",
        device=record.get("device", "cpu"),
        size_bytes=size,
        count=record["parameters"],
        nprocs=nprocs,
        nodes=record["nodes"],
        ppn=record["ppn"],
        **asdict(stats),
        rounds=len(seconds),
        iterations=record["steps"],
        algbw_gbs=algbw,
        busbw_gbs=algbw * SPECS["allreduce"].busbw_factor(nprocs),
        validation=None,
        launch=record["launch"],
        group=record["group"],
        round_us=format_rounds(np.array(seconds) * 1e6),
    )


# --- the report -------------------------------------------------------------------------


@dataclass
class Measured:
    """What the launches gave: every row (with its launch and group), each configuration's
    group, each launch's record, and what the report's header names."""

    rows: list[dict]
    home: dict[str, str]
    launches: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    nprocs: int = 0
    parameters: int = 0
    torch_threads: int = 0
    seed: int | None = None
    order: list[tuple[int, str]] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)


# What the JSON keeps of each launch's record (its rows go to "rows").
LAUNCH_FIELDS = (
    "launch",
    "group",
    "measured",
    "seconds",
    "python_threads",
    "process_threads",
    "torch_distributed",
    "notes",
)


def merge_parts(parts: list[dict], seed: int | None, order: list[tuple[int, str]]) -> Measured:
    """The launches' records (in the order they ran) as one measurement."""
    home: dict[str, str] = {}
    for part in parts:
        home.update(part["configs"])
    first = parts[0]
    return Measured(
        rows=[row for part in parts for row in part["rows"]],
        home=home,
        launches=[{k: part.get(k) for k in LAUNCH_FIELDS} for part in parts],
        skipped=list(dict.fromkeys(s for part in parts for s in part["skipped"])),
        nprocs=first["nprocs"],
        parameters=first["parameters"],
        torch_threads=first["torch_threads"],
        seed=seed,
        order=order,
        metadata=first["metadata"],
    )


def series_by_config(rows: list[dict]) -> dict[tuple[str, str], Any]:
    """(label, group) -> its selection.paired Series of img/s (launch -> rounds in order),
    the mpi group's first, then the other groups' in GROUPS order."""
    from osu_dl_bench.selection.paired import series_of

    values: dict[tuple[str, str], dict[int, list[float]]] = {}
    for row in sorted(rows, key=lambda r: (r.get("launch", 1), r["round"])):
        key = (row["config"], row.get("group", MPI_GROUP))
        values.setdefault(key, {}).setdefault(row.get("launch", 1), []).append(row["img_per_s"])
    rank = {group: i for i, group in enumerate(GROUPS)}
    keys = sorted(values, key=lambda k: rank.get(k[1], len(rank)))
    return {key: series_of(key[1], values[key]) for key in keys}


def summary_key(label: str, group: str, home: Mapping[str, str]) -> str:
    """A configuration's name in the summary: its label in its own group, 'label@group'
    where it is a reference measured in another group's launches (native@gloo)."""
    return label if home.get(label, group) == group else f"{label}@{group}"


def _ratio(series, base, *seed_parts: str) -> dict[str, float] | None:
    """img/s of ``series`` over ``base``'s, paired (selection.paired), as a dict."""
    from osu_dl_bench.selection.paired import paired_ratio

    found = paired_ratio(series, base, "train-bench", *seed_parts) if base else None
    if found is None:
        return None
    return {
        "ratio": found.ratio,
        "low": found.low,
        "high": found.high,
        "launches": found.launches,
        "rounds": found.rounds,
    }


def summarise(rows: list[dict], home: Mapping[str, str]) -> dict[str, dict]:
    """Per configuration and group: median img/s over every round of every launch, and
    its ratios against DDP-Gloo and against its group's native with their intervals."""
    series = series_by_config(rows)
    ddp = next((s for (label, _), s in series.items() if label == DDP), None)
    summary = {}
    for (label, group), mine in series.items():
        key = summary_key(label, group, home)
        summary[key] = {
            "config": label,
            "group": group,
            "median_img_per_s": statistics.median(mine.pooled().tolist()),
            "launches": len(mine.launches),
            "rounds": mine.rounds,
            "vs_ddp": _ratio(mine, ddp, key, DDP),
            "vs_native": _ratio(mine, series.get((NATIVE, group)), key, NATIVE),
            **_overlap(rows, label, group),
        }
    return summary


def _overlap(rows: list[dict], label: str, group: str) -> dict[str, Any]:
    """The configuration's gradient communication per step, medians over its rounds:
    busy, exposed after backward, the fraction hidden behind backward and the clock that
    timed them; empty where it was not timed (DDP)."""
    timed = [
        r
        for r in rows
        if r["config"] == label and r.get("group", MPI_GROUP) == group and r.get("busy_ms")
    ]
    if not timed:
        return {}
    hidden = [max(0.0, 1.0 - r["exposed_ms"] / r["busy_ms"]) for r in timed]
    return {
        "busy_ms": statistics.median(r["busy_ms"] for r in timed),
        "exposed_ms": statistics.median(r["exposed_ms"] for r in timed),
        "hidden_fraction": statistics.median(hidden),
        "clock": timed[0]["clock"],
    }


def _hidden_cell(row: Mapping[str, Any]) -> str:
    """'62% hidden' of a summary row, or '-' where it was not timed."""
    return f"{100 * row['hidden_fraction']:.0f}%" if "hidden_fraction" in row else "-"


def ratio_cell(ratio: Mapping[str, float] | None) -> str:
    """'1.27 (1.18-1.36)': the ratio and its 95% interval, or '-'."""
    from osu_dl_bench.selection.paired import bound_text

    if not ratio:
        return "-"
    return f"{ratio['ratio']:.2f} ({bound_text(ratio['low'])}-{bound_text(ratio['high'])})"


def best_tuned(summary: Mapping[str, dict]) -> tuple[str, dict | None]:
    """The best of the tuned rows (with and without overlap) against DDP by its estimate,
    as a line with its interval, and the row's ratio (None where no tuned row ran)."""
    from osu_dl_bench.selection.paired import bound_text

    tuned = {k: v["vs_ddp"] for k, v in summary.items() if k.startswith(TUNED) and v["vs_ddp"]}
    if not tuned:
        return "no tuned configuration measured", None
    best = max(tuned, key=lambda k: tuned[k]["ratio"])
    found = tuned[best]
    plural = "launch" if found["launches"] == 1 else "launches"
    return (
        f"{best} / {DDP} = {found['ratio']:.2f} (95% CI {bound_text(found['low'])}-"
        f"{bound_text(found['high'])}) over {found['launches']} {plural}",
        {**found, "config": best},
    )


def _threads_line(launches: list[dict]) -> str:
    """Each group's recorded thread counts, launch by launch, and where torch.distributed
    was bound."""
    by_group: dict[str, list[str]] = {}
    rank = {group: i for i, group in enumerate(GROUPS)}
    for launch in sorted(launches, key=lambda x: (rank.get(x["group"], len(rank)), x["launch"])):
        by_group.setdefault(launch["group"], []).append(str(launch.get("process_threads")))
    bound = sorted({x["group"] for x in launches if x.get("torch_distributed")})
    counts = "; ".join(f"{group} {' '.join(c)}" for group, c in by_group.items())
    return (
        f"# threads of rank 0's process after each launch's rounds: {counts}; "
        f"torch.distributed bound in: {', '.join(bound) or 'none'}"
    )


def report_table(cfg: TrainBenchConfig, measured: Measured) -> tuple[str, dict]:
    """(text, per-configuration summary) of the measurements."""
    summary = summarise(measured.rows, measured.home)
    per_group = max((v["launches"] for v in summary.values()), default=0)
    order = " ".join(f"{n}/{g}" for n, g in measured.order)
    lines = [
        f"# training throughput at p={measured.nprocs}: {cfg.model} depth {cfg.depth} width "
        f"{cfg.width} ({measured.parameters:,} parameters), {cfg.image_size}x{cfg.image_size} "
        f"synthetic images, global batch {cfg.batch_size}, torch threads "
        f"{measured.torch_threads}",
        f"# {per_group} launches per isolation group (the configurations binding Gloo in "
        f"launches of their own, native in every group), order {order} (seed {measured.seed}); "
        f"{cfg.rounds} rounds per launch, configurations interleaved (order rotated per "
        f"round), {cfg.warmup} warm-up + {cfg.steps} timed steps each; img/s = global batch "
        f"x steps / slowest rank's time",
        "# ratios: exp(median log-ratio of img/s) (95% CI): within a group paired round by "
        "round per launch, across groups launch k with launch k on the launch medians "
        "(cluster bootstrap, widened to Student's t over the launches)",
        _threads_line(measured.launches),
        "# hidden: median over rounds of 1 - exposed / busy gradient communication per step "
        f"(timed with {_clocks(summary)})",
        f"{'config':<38}{'group':<8}{'img/s (median)':>16}{'vs ' + DDP:>22}{'vs native':>22}"
        f"{'hidden':>8}",
    ]
    for key, row in summary.items():
        lines.append(
            f"{key:<38}{row['group']:<8}{row['median_img_per_s']:>16.1f}"
            f"{ratio_cell(row['vs_ddp']):>22}{ratio_cell(row['vs_native']):>22}"
            f"{_hidden_cell(row):>8}"
        )
    lines += [f"# {s}" for s in measured.skipped]
    lines.append(f"# best tuned configuration: {best_tuned(summary)[0]}")
    return "\n".join(lines), summary


def _clocks(summary: Mapping[str, dict]) -> str:
    """The clocks the hidden fractions were timed with (host, cuda events)."""
    found = sorted({row["clock"] for row in summary.values() if "clock" in row})
    names = {"host": "the host's clock", "cuda events": "CUDA events on the device"}
    return ", ".join(names.get(c, c) for c in found) or "no clock: nothing timed"


def report_payload(cfg: TrainBenchConfig, measured: Measured, summary: dict) -> dict[str, Any]:
    """OUT.json's content: the options, every measurement, the summary, each launch's
    record and the order they ran in."""
    return {
        "config": recorded_options(cfg),
        "parameters": measured.parameters,
        "rows": measured.rows,
        "summary": summary,
        "skipped": measured.skipped,
        "groups": measured.home,
        "launch_order": {"seed": measured.seed, "order": [f"{n}/{g}" for n, g in measured.order]},
        "launches": measured.launches,
        "best_tuned_vs_ddp": best_tuned(summary)[1],
        "metadata": measured.metadata,
    }


def write_report(out: str, text: str, payload: dict[str, Any]) -> tuple[Path, Path]:
    """Write the table to OUT.txt and the payload to OUT.json; their paths."""
    base = Path(out)
    txt, data = Path(f"{base}.txt"), Path(f"{base}.json")
    write_text_atomic(txt, text + "\n")
    write_text_atomic(data, json.dumps(payload, indent=1) + "\n")
    return txt, data
