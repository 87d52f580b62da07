"""Sweep rows, run directories and sweep options as the tests build them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from collectives import SPECS, CallContext, distinct_variants
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.registry import NULL_CONTROL_APART, algorithms
from osu_dl_bench.jobs.plan import MPI_GROUP, NULL_GROUP, variants_for, with_null_controls
from osu_dl_bench.measurement.store import (
    REQUIRED_FIELDS,
    RunStore,
    SweepPoint,
)
from support.options import command_config


def one_host_context(p: int, collective: str) -> CallContext:
    """The eligibility context of a float32 sum sweep on one host."""
    op = reduce_op("sum") if SPECS[collective].reduces else None
    return CallContext(p, element_type("float32"), op, "cpu", 1, p)


def expected_rows(
    nprocs_list, collectives, sizes, algorithm_texts=("all",), null: bool = True
) -> set[tuple]:
    """(p, collective, algorithm, size) of every eligible registered variant, one host,
    less twins (float32: a size of s bytes is s // 4 elements), with native's null
    controls (``null``: a sweep without --no-null)."""
    rows = set()
    for p in nprocs_list:
        for coll in collectives:
            ctx = one_host_context(p, coll)
            eligible = [
                v
                for v in planned(variants_for(coll, list(algorithm_texts)), null)
                if v.ineligible_reason(ctx) is None
            ]
            for s in sizes:
                rows |= {(p, coll, v.label, s) for v in distinct_variants(eligible, p, s // 4, 4)}
    return rows


def mpi_group_algorithms(collective: str) -> list[str]:
    """The names of a collective's algorithms that run over MPI: one isolation group."""
    return [a.name for a in algorithms(collective) if a.backend == MPI_GROUP]


def planned(variants: list, null: bool) -> list:
    """The variants a sweep plans: with the null controls unless --no-null."""
    return with_null_controls(variants) if null else variants


def difference(got: set, want: set) -> str:
    """What a failed set comparison should show (the registry may change under a test)."""
    return f"unexpected {sorted(got - want)[:5]}, missing {sorted(want - got)[:5]}"


def stored_rows(frame: pd.DataFrame) -> list[tuple]:
    """(p, collective, algorithm, size) of each candidate measured in its own isolation
    group (native beside another backend, and re-measurements of an outlying state, are
    extra rows by design)."""
    cols = ["nprocs", "collective", "algorithm", "size_bytes"]
    apart = (frame["algorithm"] == NULL_CONTROL_APART) & (frame["group"] == NULL_GROUP)
    own = frame[((frame["group"] == frame["backend"]) | apart) & (frame["state"] != "remeasured")]
    return [tuple(r) for r in own[cols].itertuples(index=False)]


def launches_of(job: dict) -> list[dict]:
    """A process count's launch entries in a run's metadata."""
    return list(job.get("launches", {}).values())


def sweep_point(size: int, median: float = 10.0, algorithm: str = "native") -> SweepPoint:
    values = {f: 1 for f in REQUIRED_FIELDS} | {"collective": "allreduce", "backend": "mpi"}
    values |= {"algorithm": algorithm, "dtype": "float32", "op": "sum", "device": "cpu"}
    return SweepPoint(**values | {"size_bytes": size, "median_us": median, "validation": "pass"})


def stored_run(tmp_path: Path, sizes: list[int]) -> RunStore:
    store = RunStore(tmp_path / "run")
    store.create()
    store.append([sweep_point(s) for s in sizes])
    return store


def cut_last_row(path: Path, keep: int) -> None:
    """Cut the file as a full disk does: ``keep`` bytes into its last row."""
    text = path.read_bytes()
    last = text.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(text[: last + keep])


def sweep_config(*argv: str):
    """The config of `osu-dl-bench sweep ARGV`."""
    return command_config("sweep", *argv)
