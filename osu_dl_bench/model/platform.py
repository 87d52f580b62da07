"""The platform file: the fitted (or assumed) alpha-beta-gamma parameters of a machine.

Schema version 2 (version 1, the same without ``contention_states``, still loads)::

    {"schema_version": 2, "format": "osu-dl-bench platform", "name": "...",
     "assumed": false, "source": "<where the numbers come from>",
     "cores_per_node": 2,                 # null: never oversubscribed
     "software_overhead_s": 2.1e-06,      # per message step of our Python algorithms
     "links": {"intra": LINK, "inter": LINK},
     "contention_states": [STATE, ...],   # optional, see below
     "corrections": [CORRECTION, ...],    # optional, see below
     "state_scaling": "none",             # optional: model.state's SCALINGS
     "provenance": {...}}

    STATE = {"ranks_per_node": 3, "software_overhead_s": ..., "barrier_s": ...,
             "reference": {"copy_s": ..., "allreduce_s": ...},   # optional
             "intra": LINK}

    CORRECTION = {"collective": "bcast", "algorithm": "chain:seg=64K", "nprocs": 2,
                  "nodes": 1, "min_bytes": 65536, "latency": 0.8, "bandwidth": 1.3}

    LINK = {"measured": true, "note": "...",
            "alpha_beta": [{"min_bytes": 0, "alpha_s": ..., "beta_s_per_byte": ...}, ...],
            "gamma": [{"min_bytes": 0, "gamma_s_per_byte": ...}, ...],
            "gamma_native": [...]}       # optional: the MPI library's reduction

``alpha_beta`` and ``gamma`` are piecewise in the message size: each piece applies from its
``min_bytes`` up to the next one's (a piecewise Hockney model; the pieces are the regimes of
the caches and of the MPI library's protocols). Shipped platforms (``platforms/*.json``)
have ``"assumed": true`` and name their source. Loading checks the fields against the JSON
Schema ``schemas/platform.json``, then the pieces' order and the states' rank counts.

A contention state is the intra-node link as measured with ``ranks_per_node`` ranks of one
node all active at once (a concurrent ring exchange, reductions on every rank): on a shared
node, and above all on one with fewer cores than ranks, what a message costs depends on how
many ranks compete for the cores and the memory bus. A fitted platform has one state per
calibrated rank count; ``links.intra`` and ``software_overhead_s`` repeat the state with the
fewest ranks. ``barrier_s`` is the time of one MPI_Barrier in that state: the
synchronisation of the MPI library's own shared-memory collectives; ``reference`` the
machine-state reference (measurement.reference) timed during the calibration: the state
the parameters describe.

A correction multiplies one variant's formula in one layout (process count and nodes),
from ``min_bytes`` up
to the next correction of the same variant: its per-message terms by ``latency``, its
per-byte terms by ``bandwidth`` (model.corrections: fitted to a sweep's measurements, the
efficiency of one implementation that the textbook formula does not know). Predictions
of variants or layouts without one are the formula's. ``state_scaling`` names the
reference a sweep point's prediction is scaled by (model.state); the corrections were
fitted to times divided by the same factors.
"""

from __future__ import annotations

import json
import os
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import UnreadableJson, load_json
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.selection.schema_check import first_problem, load_schema

SCHEMA_VERSION = 2  # schemas/platform.json reads 1 too: no contention states (shipped ones)
FORMAT = "osu-dl-bench platform"
PLATFORM_DIR = Path(__file__).resolve().parent / "platforms"


class PlatformError(UsageError):
    """A platform file that cannot be used: names the file and the field."""

    def __init__(self, path: str | os.PathLike, where: str, problem: str) -> None:
        super().__init__(f"platform {path}: {where}: {problem}")


@dataclass(frozen=True)
class Piece:
    """Parameters that hold from ``min_bytes`` up to the next piece."""

    min_bytes: int
    values: tuple[float, ...]


def _lookup(pieces: tuple[Piece, ...], nbytes: float) -> tuple[float, ...]:
    starts = [p.min_bytes for p in pieces]
    return pieces[max(0, bisect_right(starts, nbytes) - 1)].values


@dataclass(frozen=True)
class Link:
    """One link class: piecewise (alpha, beta) and gamma, as functions of the size."""

    alpha_beta: tuple[Piece, ...]
    gamma: tuple[Piece, ...]
    measured: bool = True
    note: str = ""
    # The MPI library's own reduction (native algorithms); None: the same as gamma.
    gamma_native: tuple[Piece, ...] | None = None

    def at(self, nbytes: float, native: bool = False) -> tuple[float, float, float]:
        """(alpha, beta, gamma) for a collective of ``nbytes`` (native: the library's gamma)."""
        alpha, beta = _lookup(self.alpha_beta, nbytes)
        gammas = self.gamma_native if native and self.gamma_native else self.gamma
        return alpha, beta, _lookup(gammas, nbytes)[0]

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        native = {}
        if self.gamma_native:
            native["gamma_native"] = [
                {"min_bytes": p.min_bytes, "gamma_s_per_byte": p.values[0]}
                for p in self.gamma_native
            ]
        return {
            **native,
            "measured": self.measured,
            "note": self.note,
            "alpha_beta": [
                {"min_bytes": p.min_bytes, "alpha_s": p.values[0], "beta_s_per_byte": p.values[1]}
                for p in self.alpha_beta
            ],
            "gamma": [
                {"min_bytes": p.min_bytes, "gamma_s_per_byte": p.values[0]} for p in self.gamma
            ],
        }


def simple_link(alpha: float, beta: float, gamma: float, note: str = "") -> Link:
    """A link with one piece each (what shipped interconnects declare)."""
    return Link((Piece(0, (alpha, beta)),), (Piece(0, (gamma,)),), True, note)


@dataclass(frozen=True)
class Reference:
    """The machine-state reference: a 1 MiB copy and an 8-byte allreduce, in seconds."""

    copy_s: float
    allreduce_s: float

    def as_dict(self) -> dict[str, float]:
        """JSON form."""
        return {"copy_s": self.copy_s, "allreduce_s": self.allreduce_s}


@dataclass(frozen=True)
class ContentionState:
    """The intra-node link measured with ``ranks`` ranks of a node all active at once."""

    ranks: int
    intra: Link
    software_overhead_s: float
    barrier_s: float | None = None
    reference: Reference | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        reference = {} if self.reference is None else {"reference": self.reference.as_dict()}
        return {
            "ranks_per_node": self.ranks,
            "software_overhead_s": self.software_overhead_s,
            "barrier_s": self.barrier_s,
            **reference,
            "intra": self.intra.as_dict(),
        }


@dataclass(frozen=True)
class Correction:
    """Factors on one variant's formula in one layout, from ``min_bytes`` on."""

    collective: str
    algorithm: str
    nprocs: int
    nodes: int
    min_bytes: int
    latency: float
    bandwidth: float

    @property
    def key(self) -> tuple[str, str, int, int]:
        """What it corrects: (collective, variant label, process count, nodes)."""
        return (self.collective, self.algorithm, self.nprocs, self.nodes)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "collective": self.collective,
            "algorithm": self.algorithm,
            "nprocs": self.nprocs,
            "nodes": self.nodes,
            "min_bytes": self.min_bytes,
            "latency": self.latency,
            "bandwidth": self.bandwidth,
        }


def _ranks(state: ContentionState) -> int:
    return state.ranks


@dataclass(frozen=True)
class Platform:
    """A machine as the model sees it."""

    name: str
    intra: Link
    inter: Link
    cores_per_node: int | None = None
    software_overhead_s: float = 0.0
    assumed: bool = False
    source: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)
    path: str | None = None
    states: tuple[ContentionState, ...] = ()
    corrections: tuple[Correction, ...] = ()
    state_scaling: str = "none"

    def state_for(self, ranks: int) -> ContentionState | None:
        """The measured state nearest ``ranks`` local ranks: the largest at most ``ranks``,
        else the smallest (None without states)."""
        if not self.states:
            return None
        below = [s for s in self.states if s.ranks <= ranks]
        return max(below, key=_ranks) if below else min(self.states, key=_ranks)

    def correction(
        self, collective: str, algorithm: str, nprocs: int, nodes: int, nbytes: int
    ) -> tuple[float, float]:
        """(latency, bandwidth) factors of a variant's formula at ``nbytes`` ((1, 1): none)."""
        found = (1.0, 1.0)
        key = (collective, algorithm, nprocs, nodes)
        for c in self.corrections:  # sorted by key, then min_bytes: the last that applies
            if c.key == key and c.min_bytes <= nbytes:
                found = (c.latency, c.bandwidth)
        return found

    def as_dict(self) -> dict[str, Any]:
        """JSON form, schema_version first."""
        return {
            "schema_version": SCHEMA_VERSION,
            "format": FORMAT,
            "name": self.name,
            "assumed": self.assumed,
            "source": self.source,
            "cores_per_node": self.cores_per_node,
            "software_overhead_s": self.software_overhead_s,
            "links": {"intra": self.intra.as_dict(), "inter": self.inter.as_dict()},
            "contention_states": [state.as_dict() for state in self.states],
            "corrections": [c.as_dict() for c in self.corrections],
            "state_scaling": self.state_scaling,
            "provenance": self.provenance,
        }

    def write(self, path: str | os.PathLike) -> Path:
        """Write as indented JSON."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, json.dumps(self.as_dict(), indent=1) + "\n")
        return target


# --- loading ----------------------------------------------------------------------------

# The fields' kinds and bounds are the JSON Schema schemas/platform.json; what relates
# several fields (pieces in increasing order, distinct contention states) is checked here.
SCHEMA = ("osu_dl_bench.model", "platform.json")


def _pieces(path: str, items: list, where: str, keys: tuple[str, ...]) -> tuple[Piece, ...]:
    pieces, last = [], -1
    for i, item in enumerate(items):
        start = item["min_bytes"]
        if (i == 0 and start != 0) or start <= last:
            raise PlatformError(
                path, f"{where}[{i}].min_bytes", f"expected 0 first, then increasing, got {start}"
            )
        pieces.append(Piece(start, tuple(float(item[k]) for k in keys)))
        last = start
    return tuple(pieces)


def _link(path: str, obj: dict, where: str) -> Link:
    native = obj.get("gamma_native")
    return Link(
        _pieces(path, obj["alpha_beta"], f"{where}.alpha_beta", ("alpha_s", "beta_s_per_byte")),
        _pieces(path, obj["gamma"], f"{where}.gamma", ("gamma_s_per_byte",)),
        obj.get("measured", True),
        obj.get("note", ""),
        None
        if native is None
        else _pieces(path, native, f"{where}.gamma_native", ("gamma_s_per_byte",)),
    )


def _state(path: str, obj: dict, where: str) -> ContentionState:
    barrier, reference = obj.get("barrier_s"), obj.get("reference")
    return ContentionState(
        obj["ranks_per_node"],
        _link(path, obj["intra"], f"{where}.intra"),
        float(obj["software_overhead_s"]),
        None if barrier is None else float(barrier),
        None
        if reference is None
        else Reference(float(reference["copy_s"]), float(reference["allreduce_s"])),
    )


def _states(path: str, items: list | None) -> tuple[ContentionState, ...]:
    states = [_state(path, item, f"contention_states[{i}]") for i, item in enumerate(items or [])]
    ranks = [s.ranks for s in states]
    if len(set(ranks)) != len(ranks):
        raise PlatformError(
            path, "contention_states", f"expected distinct ranks_per_node, got {ranks}"
        )
    return tuple(sorted(states, key=_ranks))


def _corrections(path: str, items: list | None) -> tuple[Correction, ...]:
    found = [
        Correction(
            c["collective"],
            c["algorithm"],
            c["nprocs"],
            c["nodes"],
            c["min_bytes"],
            float(c["latency"]),
            float(c["bandwidth"]),
        )
        for c in items or []
    ]
    places = [(*c.key, c.min_bytes) for c in found]
    if len(set(places)) != len(places):
        raise PlatformError(
            path, "corrections", "expected one correction per variant, p and min_bytes"
        )
    return tuple(sorted(found, key=lambda c: (*c.key, c.min_bytes)))


def platform_from_dict(data: Any, path: str = "<platform>") -> Platform:
    """Validate parsed JSON and build the platform (PlatformError on the first problem)."""
    problem = first_problem(load_schema(*SCHEMA), data)
    if problem is not None:
        raise PlatformError(path, *problem)
    links = data["links"]
    return Platform(
        name=data.get("name") or Path(path).stem,
        intra=_link(path, links["intra"], "links.intra"),
        inter=_link(path, links["inter"], "links.inter"),
        cores_per_node=data.get("cores_per_node"),
        software_overhead_s=float(data["software_overhead_s"]),
        assumed=data.get("assumed", False),
        source=data.get("source", ""),
        provenance=dict(data.get("provenance") or {}),
        path=path,
        states=_states(path, data.get("contention_states")),
        corrections=_corrections(path, data.get("corrections")),
        state_scaling=data.get("state_scaling") or "none",
    )


def shipped_platforms() -> dict[str, Path]:
    """Name -> file of the platforms shipped with the package (assumed values)."""
    return {p.stem: p for p in sorted(PLATFORM_DIR.glob("*.json"))}


def resolve_platform_path(name_or_path: str | os.PathLike) -> Path:
    """A platform file: a path, a run directory holding platform.json, or a shipped name."""
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "platform.json"
    shipped = shipped_platforms()
    # Something there that is no regular file (a FIFO): the reader says so.
    if path.is_file() or (path.exists() and str(name_or_path) not in shipped):
        return path
    if str(name_or_path) in shipped:
        return shipped[str(name_or_path)]
    raise UsageError(
        f"platform {name_or_path}: no such file, no platform.json in such a run directory, "
        f"and not a shipped platform: expected a file or one of {', '.join(shipped)}"
    )


def load_platform(name_or_path: str | os.PathLike) -> Platform:
    """Read and validate a platform file (or a shipped platform by name)."""
    path = resolve_platform_path(name_or_path)
    try:
        data = load_json(path)
    except UnreadableJson as exc:
        raise PlatformError(path, "(file)", str(exc)) from None
    return platform_from_dict(data, str(path))


def with_inter(platform: Platform, other: Platform) -> Platform:
    """``platform`` with ``other``'s inter-node link (a one-host fit plus a named network)."""
    source = f"{platform.source}; inter-node link from {other.name} ({other.source})"
    return Platform(
        name=f"{platform.name}+{other.name}",
        intra=platform.intra,
        inter=other.inter,
        cores_per_node=platform.cores_per_node,
        software_overhead_s=platform.software_overhead_s,
        assumed=platform.assumed or other.assumed,
        source=source,
        provenance={**platform.provenance, "inter_from": other.path},
        path=platform.path,
        states=platform.states,
        corrections=platform.corrections,
        state_scaling=platform.state_scaling,
    )
