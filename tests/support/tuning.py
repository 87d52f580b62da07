"""Synthetic sweep run directories for the tuning tests (helpers only, no tests here).

Until real sweeps exist, the tests write run directories through store.RunStore with
realistic values: an alpha-beta latency per algorithm, a relative spread, several process
counts, sizes and backends. Labels come from the registry, as the sweep writes them
(parameters included: 'chain:seg=256K').
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from collectives import SPECS, Algorithm, algorithms
from collectives import registry as _registry
from collectives.registry import NULL_CONTROLS, null_control, parse_variant
from osu_dl_bench.measurement.store import RunStore, SweepPoint, format_rounds
from osu_dl_bench.selection.paired import Ratio, Series, launch_of
from osu_dl_bench.selection.table import Choice, Entry, EntryKey, SizeRange, TuningTable
from osu_dl_bench.selection.tune import Candidate, decide_candidates

# Algorithms the tests name; registered by other modules of the project. A stand-in (the
# native factory, no parameters) fills in for any that a checkout does not have yet.
NEEDED = {
    "allreduce": ("ring", "recursive_doubling", "rabenseifner", "reduce_bcast", "hierarchical"),
    "bcast": ("binomial", "chain", "scatter_ring_allgather", "scatter_rd_allgather"),
}

METADATA = {
    "package_version": "0.1.0",
    "command": "osu-dl-bench sweep --np 2,4 --collectives allreduce,bcast -m 8:16M -o RUN",
    "date": "2025-01-01T00:00:00+00:00",
    "buffer_kind": "cpu",
    "dtype": "float32",
    "op": "sum",
    "mpi_library": "MPICH Version:      5.0.2",
    "mpi_version": "4.1",
    "hosts": ["refhost"],
    "nodes": 1,
    "ppn": 4,
    "jobs": {"2": {"mpi_library": "MPICH Version:      5.0.2", "hosts": ["refhost"]}},
}

# (alpha us, bytes per us) per label, per collective: shapes the winners by size.
MODELS = {
    "allreduce": {
        "native": (3.0, 2000.0),
        "recursive_doubling": (2.9, 1500.0),  # ~3% faster when small: within the noise
        "rabenseifner": (6.0, 2600.0),
        "ring": (12.0, 3400.0),
        "reduce_bcast": (5.0, 1000.0),
        "gloo": (40.0, 1800.0),
    },
    "bcast": {
        "native": (2.0, 3000.0),
        "binomial": (1.5, 2000.0),
        "chain": (8.0, 4500.0),
        "scatter_ring_allgather": (9.0, 3600.0),
        "scatter_rd_allgather": (7.0, 3300.0),
        "gloo": (30.0, 2500.0),
    },
}


def register_stand_ins(monkeypatch):
    """Make sure every algorithm of NEEDED is registered (stand-ins removed afterwards)."""
    native = {c: _registry.lookup(c, "native") for c in NEEDED}
    for collective, names in NEEDED.items():
        present = {a.name for a in algorithms(collective)}
        for name in names:
            if name not in present:
                stand_in = Algorithm(collective, name, native[collective].factory)
                monkeypatch.setitem(_registry._REGISTRY, (collective, name), stand_in)
    return NEEDED


def label(collective: str, name: str) -> str:
    """The label a sweep writes for an algorithm (defaults shown as parameters)."""
    return parse_variant(collective, name).label


def point(
    collective: str,
    name: str,
    size: int,
    median: float,
    spread: float,
    nprocs: int = 4,
    nodes: int = 1,
    ppn: int | None = None,
    validation: str | None = "pass",
    device: str = "cpu",
) -> SweepPoint:
    """One point; ``spread`` = q3 - q1, centred on the median (``name`` may be a null
    control's label: native's variant under it)."""
    variant = (
        null_control(parse_variant(collective, "native"), name)
        if name in NULL_CONTROLS
        else parse_variant(collective, name)
    )
    spec = SPECS[collective]
    seconds = median * 1e-6
    algbw = size / seconds / 1e9
    return SweepPoint(
        collective=collective,
        backend=variant.algorithm.backend,
        algorithm=variant.label,
        dtype="float32",
        op="sum" if spec.reduces else None,
        device=device,
        size_bytes=size,
        count=max(size // 4, 1),
        nprocs=nprocs,
        nodes=nodes,
        ppn=ppn or nprocs // nodes,
        median_us=median,
        q1_us=median - spread / 2,
        q3_us=median + spread / 2,
        spread_us=spread,
        min_us=median - spread,
        max_us=median + 2 * spread,
        rounds=7,
        iterations=20,
        algbw_gbs=algbw,
        busbw_gbs=algbw * spec.busbw_factor(nprocs),
        validation=validation,
    )


def write_run(path: Path, points: list[SweepPoint], metadata: dict | None = None) -> Path:
    """A run directory with these points and metadata."""
    store = RunStore(path)
    store.create()
    store.append(points)
    store.write_metadata(dict(metadata or METADATA))
    return path


def model_points(
    nprocs_list=(2, 4), sizes=None, collectives=("allreduce", "bcast"), seed=7
) -> list[SweepPoint]:
    """Realistic points from MODELS: latency grows with lg p, 5% spread, seeded jitter."""
    rng = np.random.default_rng(seed)
    sizes = sizes or [8 << (2 * k) for k in range(12)]  # 8 B .. 32 MiB, every 4x
    points = []
    for collective in collectives:
        names = [n for n in MODELS[collective] if n != "gloo" or _has(collective, "gloo")]
        for nprocs in nprocs_list:
            for size in sizes:
                for name in names:
                    alpha, rate = MODELS[collective][name]
                    median = (alpha * math.log2(2 * nprocs) + size / rate) * rng.uniform(0.99, 1.01)
                    points.append(point(collective, name, size, median, 0.05 * median, nprocs))
    return points


def _has(collective: str, name: str) -> bool:
    return any(a.name == name for a in algorithms(collective))


def table_json(path: Path) -> dict:
    """A written table, parsed."""
    return json.loads(path.read_text())


def make_entry(nprocs, spans, collective="allreduce", nodes=1, ppn=None, measured=(8, 1 << 20)):
    """An entry from spans [(start, algorithm name)]; each range ends where the next starts."""
    ends = [start for start, _ in spans[1:]] + [None]
    ranges = tuple(
        SizeRange(start, end, Choice.of(parse_variant(collective, name)))
        for (start, name), end in zip(spans, ends, strict=True)
    )
    key = EntryKey(collective, "cpu", nodes, ppn or nprocs // nodes, nprocs)
    return Entry(key, ranges, measured)


def make_table(*entries):
    """An in-memory table of these entries."""
    return TuningTable(tuple(entries), {"schema_version": 1}, "mem.json")


# --- multi-launch sweeps (sweep --launches K): per-round times, isolation groups ----------


def machine_states(launches: int = 3, rounds: int = 20, base: float = 100.0, seed: int = 0):
    """Per launch, one reference candidate's round times (us) on a machine whose speed
    moves between launches (x1, x1.6, x0.8, ...) and from round to round (10%): what every
    candidate of the launch's group shares, round by round."""
    rng = np.random.default_rng(seed)
    states = [1.0, 1.6, 0.8, 1.3, 0.9][:launches] + [1.0] * max(0, launches - 5)
    return [base * state * rng.lognormal(0.0, 0.1, rounds) for state in states]


def scaled(states, factors, jitter: float = 0.005, seed: int = 1):
    """The rounds of a candidate that takes ``factors[k]`` (or one factor) times the
    shared state in launch k, with its own small jitter."""
    rng = np.random.default_rng(seed)
    if isinstance(factors, (int, float)):
        factors = [factors] * len(states)
    return [
        s * f * rng.lognormal(0.0, jitter, len(s)) for s, f in zip(states, factors, strict=True)
    ]


def launch_rows(
    collective: str,
    name: str,
    size: int,
    launches,
    group: str | None = None,
    nprocs: int = 2,
    validation: str | None = "pass",
    state: str = "normal",
) -> list[SweepPoint]:
    """One candidate's rows of a multi-launch sweep, one per launch (1, 2, ...): its
    per-round times and the statistics over them, in its backend's isolation group."""
    rows = []
    for number, rounds in enumerate(launches, start=1):
        values = np.asarray(rounds, dtype=float)
        q1, median, q3 = (float(v) for v in np.percentile(values, [25, 50, 75]))
        base = point(collective, name, size, median, q3 - q1, nprocs, validation=validation)
        rows.append(
            replace(
                base,
                q1_us=q1,
                q3_us=q3,
                min_us=float(values.min()),
                max_us=float(values.max()),
                rounds=values.size,
                launch=number,
                group=group or base.backend,
                state=state,
                round_us=format_rounds(values),
            )
        )
    return rows


def decision(size: int, ratios: dict, collective: str = "allreduce", nprocs: int = 2):
    """A point's decision from hand-made ratios to native: {label: (ratio, low, high)}
    ('native' is 1, [1, 1] whether named or not; its median is 100 us); labels as the
    sweep writes them."""
    ratios = {"native": (1.0, 1.0, 1.0), **ratios}
    candidates = {}
    for name, values in ratios.items():
        choice = Choice.of(parse_variant(collective, name))
        ratio = Ratio(*values, launches=3, rounds=60)
        # One launch of three equal rounds at 100 us x ratio: medians for the table's point.
        median = 100.0 * values[0]
        series = Series("mpi", (launch_of(1, [median] * 3, median, median, median, 3),))
        candidates[choice.label] = Candidate(choice, series, ratio)
    key = EntryKey(collective, "cpu", 1, nprocs, nprocs)
    return decide_candidates(key, size, max(size // 4, 1), candidates, "native")


def launch_run(
    path: Path,
    plan: dict,
    nprocs: int = 2,
    seed: int = 0,
    collective="allreduce",
    launches: int = 3,
):
    """A multi-launch run directory: at each size of ``plan`` ({size: {name: factor or
    per-launch factors}}), clean native on shared machine states (``launches`` launches x
    20 rounds) and each candidate paired with it in the mpi group."""
    rows = []
    for offset, (size, candidates) in enumerate(sorted(plan.items())):
        states = machine_states(launches=launches, rounds=20, seed=seed + offset)
        rows += launch_rows(collective, "native", size, states, nprocs=nprocs)
        for number, (name, factors) in enumerate(candidates.items(), start=1):
            times = scaled(states, factors, seed=seed + 100 * offset + number)
            rows += launch_rows(collective, name, size, times, nprocs=nprocs)
    return write_run(path, rows)


def p2_train_table(tmp_path: Path, collectives=("allreduce", "bcast")) -> Path:
    """A p=2 table: allreduce recursive doubling below 64 KiB, ring above; bcast chain."""
    choice = {
        "recursive_doubling": {"backend": "mpi", "algorithm": "recursive_doubling", "params": {}},
        "ring": {"backend": "mpi", "algorithm": "ring", "params": {"seg": 65536}},
        "chain": {"backend": "mpi", "algorithm": "chain", "params": {}},
    }
    ranges = {
        "allreduce": [
            {"min_bytes": 0, "max_bytes": 65536, "choice": choice["recursive_doubling"]},
            {"min_bytes": 65536, "max_bytes": None, "choice": choice["ring"]},
        ],
        "bcast": [{"min_bytes": 0, "max_bytes": None, "choice": choice["chain"]}],
    }
    entries = [
        {
            "collective": c,
            "device": "cpu",
            "nodes": 1,
            "ppn": 2,
            "nprocs": 2,
            "measured_bytes": [8, 1 << 24],
            "ranges": ranges[c],
        }
        for c in collectives
    ]
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"schema_version": 1, "entries": entries}))
    return path
