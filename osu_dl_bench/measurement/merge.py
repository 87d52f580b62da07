"""Several sweeps' run directories as one (for example one sweep per process count, each
between calibration jobs, read by ``tune``, ``plot`` or ``model accuracy`` together).

The runs must share their MPI library, its version and their hosts (IDENTITY; the
``allow_mixed`` words of MIXABLE merge others, each run's recorded). The rows are appended
in the order the runs are given; a point measured in several runs keeps every row, and
readers take the last one, as after ``sweep --resume``. The metadata is the last run's,
with the jobs of all (a process count in several runs keeps the earlier jobs under
``previous``), every host, the largest nodes and ppn, and ``merged_from`` (each run's
directory, rows and identity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement import IDENTITY, MIXABLE
from osu_dl_bench.measurement.store import (
    METADATA,
    POINT_KEY,
    SCHEMA_VERSION,
    SWEEP_FIELDS,
    RunStore,
    SweepPoint,
    launch_entries,
)
from osu_dl_bench.runtime.metadata import COMMAND_KEY, utc_now


@dataclass(frozen=True)
class Merged:
    """What a merge wrote: the merged results file, its rows, the runs merged and the rows
    that measure a point again (readers take the last)."""

    results_path: Path
    rows: int
    runs: int
    repeated: int


def merge_runs(runs: list[str], output: str, allow_mixed: str, command: str) -> Merged:
    """Merge the run directories ``runs`` into the new run directory ``output``, refusing
    runs that differ in an IDENTITY field outside ``allow_mixed`` (a comma list of MIXABLE
    words); ``command`` is the merged metadata's command line."""
    sources = merge_sources(runs, output)
    frames = [RunStore(path).load() for path in sources]
    metadata = [RunStore(path).read_metadata() for path in sources]
    refuse_mixed(sources, metadata, mixable_fields(allow_mixed))
    merged = pd.concat(frames, ignore_index=True)
    # Before anything is written: a metadata field merging cannot read stops it here.
    combined = merged_metadata(sources, metadata, [len(f) for f in frames], command)
    out = RunStore(output)
    check_output(out)
    lock = out.lock()
    try:
        out.append(sweep_points(merged))
        parquet = out.write_parquet()
        out.write_metadata({**combined, "parquet": parquet is not None})
    finally:
        lock.release()
    repeated = int(merged.duplicated(list(POINT_KEY), keep="last").sum())
    return Merged(out.results_path, len(merged), len(sources), repeated)


def merge_sources(runs: list[str], output: str) -> list[Path]:
    """The runs to merge: at least two, distinct, each with results, none the output."""
    paths = [Path(run) for run in runs]
    if len(paths) < 2:
        raise UsageError(f"merge: expected at least two run directories, got {len(paths)}")
    resolved = [p.resolve() for p in paths]
    if len(set(resolved)) != len(resolved):
        raise UsageError("merge: a run directory is given twice")
    if Path(output).resolve() in resolved:
        raise UsageError(f"-o {output}: is one of the runs to merge; choose a new directory")
    for path in paths:
        if not RunStore(path).results_path.is_file():
            raise UsageError(f"{path}: no results.csv (expected a sweep's run directory)")
    return paths


def mixable_fields(text: str) -> set[str]:
    """--allow-mixed's list as IDENTITY fields (UsageError naming an unknown word)."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in words if w not in MIXABLE]
    if unknown:
        raise UsageError(f"--allow-mixed {text}: {unknown[0]!r} is none of {', '.join(MIXABLE)}")
    return {MIXABLE[w] for w in words}


def _identity(meta: dict[str, Any]) -> dict[str, Any]:
    """A run's IDENTITY fields (hosts as a sorted list)."""
    found = {name: meta.get(name) for name in IDENTITY}
    if isinstance(found["hosts"], list):
        found["hosts"] = sorted(map(str, found["hosts"]))
    return found


def refuse_mixed(sources: list[Path], metadata: list[dict[str, Any]], allowed: set[str]) -> None:
    """UsageError naming the first field outside ``allowed`` and the runs that differ in
    it."""
    first = _identity(metadata[0])
    for path, meta in zip(sources[1:], metadata[1:], strict=True):
        theirs = _identity(meta)
        for name in (n for n in IDENTITY if n not in allowed):
            if theirs[name] != first[name]:
                raise UsageError(
                    f"merge: {sources[0]} and {path} differ in {name} ({first[name]!r} vs "
                    f"{theirs[name]!r}): their times are not one machine's; merge runs of one "
                    f"library and machine, or pass --allow-mixed {_word_for(name)}"
                )


def _word_for(name: str) -> str:
    return next(word for word, field in MIXABLE.items() if field == name)


def check_output(out: RunStore) -> None:
    """The output may exist (it may hold calibrations, other files) but not a run's files."""
    if out.path.exists() and not out.path.is_dir():
        raise UsageError(f"-o {out.path}: expected a directory, got a file")
    for name in (out.results_path.name, METADATA):
        if (out.path / name).exists():
            raise UsageError(
                f"-o {out.path}: already holds {name}; merge into a new directory "
                "(or one without a run's results)"
            )


def sweep_points(frame: pd.DataFrame) -> list[SweepPoint]:
    """The rows as the store writes them (missing op and validation as None)."""
    records = frame[list(SWEEP_FIELDS)].astype(object).to_dict("records")
    return [SweepPoint(**{k: _none_if_missing(v) for k, v in row.items()}) for row in records]


def _none_if_missing(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def _merged_jobs(metadata: list[dict[str, Any]]) -> dict[str, Any]:
    """Every run's jobs by process count; a later run's job keeps the earlier ones under
    ``previous``, as a resumed sweep does."""
    jobs: dict[str, Any] = {}
    for meta in metadata:
        for nprocs, job in (meta.get("jobs") or {}).items():
            earlier = jobs.get(nprocs)
            if earlier is None:
                jobs[nprocs] = job
                continue
            previous = [*earlier.pop("previous", []), earlier, *job.get("previous", [])]
            jobs[nprocs] = {**job, "previous": previous}
    return jobs


def merged_metadata(
    sources: list[Path], metadata: list[dict[str, Any]], rows: list[int], command: str
) -> dict[str, Any]:
    """The last run's metadata, with every run's jobs and hosts, where it came from, and
    ``command``, the merge's command line."""
    merged = {**metadata[-1], "schema_version": SCHEMA_VERSION}
    jobs = _merged_jobs(metadata)
    entries = [entry for job in jobs.values() for entry in launch_entries(job)]
    merged.update(
        jobs=jobs,
        hosts=sorted({h for meta in metadata for h in meta.get("hosts") or []}),
        nodes=max((e.get("nodes", 0) for e in entries), default=merged.get("nodes")),
        ppn=max((e.get("ppn", 0) for e in entries), default=merged.get("ppn")),
        nprocs=sorted({int(p) for meta in metadata for p in meta.get("nprocs") or []}),
        collectives=list(
            dict.fromkeys(c for meta in metadata for c in meta.get("collectives") or [])
        ),
        sessions=[s for meta in metadata for s in meta.get("sessions") or []],
        complete=all(meta.get("complete", False) for meta in metadata),
        merged_from=[
            {
                "run_dir": str(path),
                "rows": count,
                COMMAND_KEY: meta.get(COMMAND_KEY),
                **_identity(meta),
            }
            for path, meta, count in zip(sources, metadata, rows, strict=True)
        ],
        command=command,
        date=utc_now(),
    )
    return merged
