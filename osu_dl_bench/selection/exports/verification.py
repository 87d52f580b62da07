"""Whether an MPI library applied an exported selection file, and the speedup the file
gives: the numbers of ``osu-dl-bench verify-export``.

The library's plain collectives (native, no Python algorithm) run with the file loaded and
without it, in launches of their own, interleaved (the file's launches are the isolation
group jobs.plan.FILE_GROUP); the speedup per size is the two groups paired by launch
medians (selection.paired), with the launch-to-launch variance pooled over every size
(selection.estimate).

Proof (MPICH): each algorithm the file names also runs forced (native:alg=NAME, launches
of its own), and every launch records the allreduce fingerprints (collectives.mpit.
fingerprints: a reduction declared commutative that is not, so the result shows which
algorithm combined it) at every size. The file took effect where, at every size, its
fingerprint is that of the algorithm it names there (or the default's where it keeps the
default); it is proven where at least one such algorithm's fingerprint differs from the
default's. A mismatch means the library did not apply the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from osu_dl_bench.jobs.plan import FILE_GROUP, FORCED_PREFIX, MPI_GROUP
from osu_dl_bench.selection.estimate import pooled_ratios
from osu_dl_bench.selection.evidence import LaunchValues, Observation, launch_values
from osu_dl_bench.selection.exports.readers import Reader
from osu_dl_bench.selection.paired import Ratio
from osu_dl_bench.selection.tune import series_of, usable_rows

# --- proof --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fingerprinted:
    """One size of one launch whose fingerprint with the file was checked against the
    algorithm the file names there (None: the library's default)."""

    nprocs: int
    launch: int
    size: int
    algorithm: str | None


@dataclass(frozen=True)
class Proof:
    """What the fingerprints say: the sizes where the file's algorithm was seen and could be
    told from the default, the mismatches (the file not applied), and how many were checked."""

    seen: tuple[Fingerprinted, ...]
    mismatches: tuple[Fingerprinted, ...]
    checked: int

    @property
    def distinguishable(self) -> int:
        """Checked sizes whose named algorithm's fingerprint differs from the default's."""
        return len(self.seen)


def _fingerprints(entries: dict[str, Any], launch: int, group: str) -> dict[str, Any]:
    """A launch's recorded fingerprints (size text -> every rank's hash)."""
    return entries.get(f"{launch}/{group}", {}).get("fingerprints") or {}


def prove(metadata: dict[str, Any], reader: Reader, launches: int) -> Proof:
    """Compare each launch's fingerprints with and without the file (see the module text)."""
    seen: list[Fingerprinted] = []
    mismatches: list[Fingerprinted] = []
    checked = 0
    for nprocs, job in sorted((metadata.get("jobs") or {}).items()):
        entries = job.get("launches") or {}
        for launch in range(1, launches + 1):
            plain = _fingerprints(entries, launch, MPI_GROUP)
            for size, found in _fingerprints(entries, launch, FILE_GROUP).items():
                alg = reader("allreduce", int(nprocs), int(size))
                reference = (
                    plain if alg is None else _fingerprints(entries, launch, FORCED_PREFIX + alg)
                )
                expected = reference.get(size)
                if expected is None:
                    continue
                checked += 1
                where = Fingerprinted(int(nprocs), launch, int(size), alg)
                if found != expected:
                    mismatches.append(where)
                elif alg is not None and expected != plain.get(size):
                    seen.append(where)
    return Proof(tuple(seen), tuple(mismatches), checked)


# --- speedup ------------------------------------------------------------------------------

# (collective, p, size) and its launches' log-ratios, with the file over without it.
Paired = tuple[tuple, LaunchValues]


def sweep_pairs(frame: pd.DataFrame) -> list[Paired]:
    """The sweep's native with the file against without it, per (collective, p, size)."""
    rows = usable_rows(frame)
    native = rows[rows["algorithm"] == "native"]
    found = []
    keys = ["collective", "nprocs", "size_bytes"]
    for where, at in native.groupby(keys, sort=True):
        default, loaded = (at[at["group"] == g] for g in (MPI_GROUP, FILE_GROUP))
        if default.empty or loaded.empty:
            continue
        values = launch_values(series_of(loaded), series_of(default))
        if values is not None:
            found.append((where, values))
    return found


def client_pairs(latencies: dict[tuple, dict[int, float]]) -> list[Paired]:
    """The C client's launches as per-launch log-ratios, with the file over without it:
    ``latencies`` maps (collective, p, size, with_file) to {launch: us}."""
    found = []
    for (collective, nprocs, size, with_file), loaded in sorted(latencies.items()):
        if not with_file:
            continue
        default = latencies.get((collective, nprocs, size, False), {})
        pairs = [
            (k, math.log(loaded[k] / default[k]))
            for k in sorted(set(loaded) & set(default))
            if loaded[k] > 0 < default[k]
        ]
        if pairs:
            launches, values = zip(*pairs, strict=True)
            unknown = np.full(len(values), np.nan)  # the client reports means only
            found.append(
                (
                    (collective, nprocs, size),
                    LaunchValues(launches, np.array(values), unknown, False),
                )
            )
    return found


def file_ratios(client: str, found: list[Paired]) -> list[Ratio]:
    """Per (collective, p, size) of ``found``, in its order: the time with the file over
    without it, with its 95% interval, the launch-to-launch variance pooled over every
    size (selection.estimate)."""
    # One pool per client, collective and p: launches at p = 4 swing more than at p = 2.
    observations = [Observation((client, *w[:2]), client, int(w[2]), v) for w, v in found]
    return pooled_ratios(observations)


def slower_with_file(ratio: Ratio) -> bool:
    """The file's time over the default's lies above 1 over its whole interval."""
    return ratio.low > 1
