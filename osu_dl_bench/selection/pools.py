"""Launch-variance pools kept between runs, so that an adaptive sweep's one screening launch
can be judged: one launch holds no launch-to-launch variance of its own.

A pool (selection.evidence.LaunchPool: the variance components per entry, size band and
pairing) is stored per (host set, MPI library, version) in
``$XDG_CACHE_HOME/osu-dl-bench/pools/<digest>.json`` (``~/.cache`` without the variable,
after the XDG Base Directory Specification), written atomically (paths.write_atomic). A
stored pool is read only for a run of exactly the same hosts, library and version, the
identity written inside the file checked field by field (never the file name alone); a
later run of the same identity adds its entries and replaces those it measured again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from osu_dl_bench.jsonfile import UnreadableJson, describe, is_kind, load_json
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.selection.evidence import BAND_EDGES, Component, LaunchPool
from osu_dl_bench.selection.table import EntryKey

POOL_SCHEMA = 1


@dataclass(frozen=True)
class PoolIdentity:
    """What a stored pool is valid for: the host set, the MPI library and its version."""

    hosts: tuple[str, ...]
    mpi_library: str
    mpi_version: str

    @classmethod
    def of_run(cls, metadata: Mapping[str, Any]) -> PoolIdentity | None:
        """The identity a run's metadata records (None where any part is missing)."""
        hosts, library, version = (metadata.get(k) for k in ("hosts", "mpi_library", "mpi_version"))
        if not (isinstance(hosts, list) and hosts and all(isinstance(h, str) for h in hosts)):
            return None
        if not (isinstance(library, str) and library and isinstance(version, str) and version):
            return None
        return cls(tuple(sorted(set(hosts))), library, version)

    def as_record(self) -> dict[str, Any]:
        """The identity as JSON."""
        return {
            "hosts": list(self.hosts),
            "mpi_library": self.mpi_library,
            "mpi_version": self.mpi_version,
        }

    @property
    def digest(self) -> str:
        """A file name for the identity (its SHA-256, 16 hex digits)."""
        text = json.dumps(self.as_record(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def text(self) -> str:
        """'hosts a, b; MPICH Version: 5.0.2 (5.0)'."""
        library = " ".join(self.mpi_library.split())
        return f"hosts {', '.join(self.hosts)}; {library} ({self.mpi_version})"


def pool_dir() -> Path:
    """Where pools are kept: $XDG_CACHE_HOME/osu-dl-bench/pools (~/.cache without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "osu-dl-bench" / "pools"


def pool_path(identity: PoolIdentity) -> Path:
    """The file of one identity's pool."""
    return pool_dir() / f"{identity.digest}.json"


def _component_record(key: tuple, component: Component) -> dict[str, Any]:
    entry, band, paired = key
    return {
        "entry": None if entry is None else asdict(entry),
        "band": band,
        "paired": paired,
        # numpy scalars (a count summed over booleans) as JSON's numbers
        "component": {k: getattr(v, "item", lambda v=v: v)() for k, v in asdict(component).items()},
    }


def _component_of(record: Any) -> tuple[tuple, Component]:
    """One stored component (ValueError where it is not one)."""
    if not isinstance(record, dict):
        raise ValueError("a component is not an object")
    entry = record.get("entry")
    key_entry = None if entry is None else EntryKey(**entry)
    band = record.get("band")
    if band is not None and (not isinstance(band, int) or not 0 <= band < len(BAND_EDGES)):
        raise ValueError(f"band {band!r} is not one of the size bands")
    if not isinstance(record.get("paired"), bool):
        raise ValueError("paired is not true or false")
    stored = record.get("component")
    names = {f.name for f in fields(Component)}
    if not isinstance(stored, dict) or not {"point_launch", "launch_wide", "points", "df"} <= set(
        stored
    ):
        raise ValueError("a component lacks its variances")
    values = {k: v for k, v in stored.items() if k in names}
    for name, value in values.items():
        _check_field(name, value)
    component = Component(**values)
    if component.points < 1:
        raise ValueError("a component rests on no point")
    return (key_entry, band, record["paired"]), component


# The largest variance of a log time ratio read back: an sd of 5, a factor of e^5 (about
# 150x) from launch to launch, is no machine's noise but a damaged or hostile file; larger
# ones overflow exp() in the intervals built from them.
MAX_VARIANCE = 25.0
# The largest count read back (points, df, launches): far above any sweep's.
MAX_COUNT = 10**9
_COUNTS = ("points", "df", "heterogeneous", "launches")


def _check_field(name: str, value: Any) -> None:
    """ValueError unless a stored component's field is in range: variances finite in [0,
    MAX_VARIANCE], counts whole numbers in [0, MAX_COUNT], the correlation in [-1, 1], the
    wider pool a variance was borrowed from a short text."""
    if name == "borrowed":
        if not (isinstance(value, str) and len(value) <= 200 and value.isprintable()):
            raise ValueError(f"borrowed {describe(value)} is not a pool's name")
        return
    if name in _COUNTS:
        if not (is_kind(value, int) and 0 <= value <= MAX_COUNT):
            raise ValueError(
                f"{name} {describe(value)} is not a whole number from 0 to {MAX_COUNT}"
            )
        return
    low, high = (-1.0, 1.0) if name == "correlation" else (0.0, MAX_VARIANCE)
    if not (is_kind(value, (int, float)) and low <= value <= high):
        raise ValueError(f"{name} {describe(value)} is not a number from {low:g} to {high:g}")


def read_pool(identity: PoolIdentity) -> tuple[LaunchPool | None, str]:
    """The stored pool of exactly this identity, or None; and a line saying which, or why
    none (absent, unreadable, another identity's)."""
    path = pool_path(identity)
    if not path.exists():
        return None, f"no stored launch-variance pool for {identity.text()} (kept in {pool_dir()})"
    try:
        stored = load_json(path)
        if not isinstance(stored, dict) or stored.get("schema") != POOL_SCHEMA:
            raise ValueError("not a launch-variance pool of this version")
        if stored.get("identity") != identity.as_record():
            return None, f"{path} holds another host set, library or version's pool: not used"
        components = dict(_component_of(record) for record in stored.get("components", ()))
        within = stored.get("within", 0.0)
        _check_field("within", within)
    except (UnreadableJson, ValueError, TypeError) as exc:
        return None, f"{path}: not used ({exc})"
    if not components:
        return None, f"{path}: holds no component: not used"
    return LaunchPool(components, float(within)), f"the stored launch-variance pool {path}"


def store_run_pool(metadata: Mapping[str, Any], pool: LaunchPool) -> Path | None:
    """Store a run's own pool under the run's identity (None: the run names no identity,
    or its pool has no component, as a run of one launch)."""
    identity = PoolIdentity.of_run(metadata)
    if identity is None or not pool.components:
        return None
    return write_pool(identity, pool)


def write_pool(identity: PoolIdentity, pool: LaunchPool) -> Path:
    """Store ``pool`` for ``identity`` (atomically), over the stored components of the same
    keys and beside the others; the file's path."""
    known, _ = read_pool(identity)
    components = {**(known.components if known else {}), **pool.components}
    record = {
        "schema": POOL_SCHEMA,
        "identity": identity.as_record(),
        "within": pool.within,
        "components": [_component_record(k, c) for k, c in components.items()],
    }
    path = pool_path(identity)
    write_text_atomic(path, json.dumps(record, indent=1))
    return path
