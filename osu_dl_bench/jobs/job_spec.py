"""The typed spec of a job the sweep launches: the orchestrator writes it as JSON into the
run directory and the child (``python -m osu_dl_bench.jobs.child SPEC``) reads it, so no
command line is rebuilt for the child to parse again. No MPI here.

A spec that is not one this version wrote (a field missing, unknown or of the wrong kind,
another format version) is refused with one message naming the file and the field; every
rank reads the same file, so every rank refuses it alike (exit 2, never a hang).
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from collectives.shape import JobShape
from collectives.units import doubling_sizes
from osu_dl_bench import __version__
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import NULL, UnreadableJson, describe, is_kind, kind_text, load_json
from osu_dl_bench.paths import write_text_atomic

SPEC_FORMAT = "osu-dl-bench job spec"
# Raised whenever a field is added, removed or changes meaning: a child refuses a spec of
# another version rather than guess what its fields meant.
SPEC_VERSION = 1
# What a child does: plan every launch of the sweep (one process, no communication), or
# measure one launch of one isolation group. INSIDE is no child's: a sweep run by hand
# inside one MPI job (sweep --inside) measures launch 1 of every group in turn.
PLAN, MEASURE, INSIDE = "plan", "measure", "inside"
ROLES = (PLAN, MEASURE, INSIDE)
# An isolation group is a backend's name ('mpi', 'gloo', 'nccl') or a forced library
# algorithm's ('alg_NAME'): a plain lowercase word (it is stored in every row).
GROUP_NAME = re.compile(r"[a-z][a-z0-9_]*")
# The most launches a sweep may have (--launches, --adaptive).
MAX_LAUNCHES = 100
# Where the orchestrator keeps its jobs' specs, in the run directory.
SPECS_FOLDER = "jobs"
# The module a launched job runs (``python -m CHILD_MODULE SPEC``).
CHILD_MODULE = "osu_dl_bench.jobs.child"


@dataclass(frozen=True)
class Measurement:
    """What every job of a sweep measures and how: the part of the sweep's options the
    launched jobs (and the planner) use."""

    collectives: tuple[str, ...]
    min_size: int
    max_size: int
    algorithms: str
    dtype: str
    op: str
    device: str
    emulated_ppn: int | None  # --ranks-per-node: emulated nodes of this many ranks
    # Timed seconds per point in one launch, all its candidates together (the sweep's
    # --budget shared by its launches).
    launch_budget: float
    thread_level: str
    calibrate: bool = True  # the model's calibration kernels in each MPI-group launch
    # The null control (collectives.registry.NULL_CONTROLS) measured wherever native is.
    null_control: bool = False
    # verify-export: the MPI library's selection file measured in launches of its own
    # (isolation group 'library_file'); every launch records its allreduce fingerprints.
    library_file: str | None = None

    def __post_init__(self) -> None:
        _require(bool(self.collectives), "collectives", "at least one collective")
        _require(0 <= self.min_size <= self.max_size, "max_size", "min_size <= max_size")
        _require(self.launch_budget > 0, "launch_budget", "a positive number of seconds")
        _require(self.emulated_ppn is None or self.emulated_ppn >= 1, "emulated_ppn", ">= 1")

    def sizes(self) -> list[int]:
        """Message sizes in bytes: MIN, 2 MIN, ... up to MAX (OSU's doubling loop)."""
        return doubling_sizes(self.min_size, self.max_size)

    def element_counts(self, collective: str, itemsize: int) -> list[int]:
        """Element count per size; sizes below one element are dropped, as in OSU."""
        if collective == "barrier":
            return [0]
        counts = [size // itemsize for size in self.sizes()]
        return sorted({n for n in counts if n > 0})


@dataclass(frozen=True)
class JobSpec:
    """One child's orders: plan the sweep, or measure launch ``launch`` of isolation group
    ``group`` at each process count of ``nprocs``, into the run directory ``run_dir``."""

    role: str
    run_dir: str
    nprocs: tuple[int, ...]
    measure: Measurement
    launches: int  # the launches of this session's sweep: 1..launches (a count)
    launch: int | None = None  # MEASURE only: which of them this job is
    group: str | None = None  # MEASURE only: the isolation group
    # PLAN only: the shape each process count's job is expected to get (jobs.launch's
    # expected_shape: the orchestrator knows its launcher and hosts, the planner does not).
    shapes: tuple[JobShape, ...] = ()

    def __post_init__(self) -> None:
        _require(self.role in ROLES, "role", " or ".join(ROLES))
        _require(1 <= self.launches <= MAX_LAUNCHES, "launches", f"1 to {MAX_LAUNCHES}")
        _require(bool(self.nprocs) and min(self.nprocs) >= 1, "nprocs", "process counts >= 1")
        measures = self.role == MEASURE
        _require(
            (self.launch is not None) == measures and (self.group is not None) == measures,
            "launch",
            "a launch and a group for a measuring job, neither otherwise",
        )
        if self.launch is not None:
            _require(
                1 <= self.launch <= self.launches,
                "launch",
                f"a launch from 1 to launches ({self.launches})",
            )
        if self.group is not None:
            named = bool(GROUP_NAME.fullmatch(self.group))
            _require(named, "group", "a backend's name (mpi, gloo, nccl)")
        planned = tuple(shape.nprocs for shape in self.shapes)
        _require(
            planned == (self.nprocs if self.role == PLAN else ()),
            "shapes",
            "one shape per process count for the planner, none otherwise",
        )
        for shape in self.shapes:
            problem = shape.problem()
            _require(problem is None, "shapes", f"shapes that hold their ranks ({problem})")


class SpecError(UsageError):
    """A spec file this version cannot run; the message names the file and why."""


def _require(holds: bool, field: str, expected: str) -> None:
    if not holds:
        raise SpecError(f"{field}: expected {expected}")


def spec_path(run_dir: str | Path, nprocs: int, launch: int, group: str) -> Path:
    """Where the orchestrator writes the spec of one job."""
    return Path(run_dir).resolve() / SPECS_FOLDER / f"p{nprocs}-{launch}-{group}.json"


def child_argv(spec: str | Path) -> list[str]:
    """The arguments of ``python`` that run the job whose spec is the file ``spec``: its
    path, nothing else."""
    return ["-m", CHILD_MODULE, str(spec)]


def write_spec(spec: JobSpec, path: str | Path) -> Path:
    """Write ``spec`` to ``path`` (atomically: a child never reads half a spec)."""
    document = {
        "format": SPEC_FORMAT,
        "version": SPEC_VERSION,
        "package_version": __version__,
        "spec": asdict(spec),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(document, indent=1) + "\n")
    return path


def read_spec(path: str | Path) -> JobSpec:
    """The JobSpec in ``path``; SpecError if it is not one this version wrote."""
    try:
        document = load_json(path)
    except UnreadableJson as exc:
        raise SpecError(f"job spec {path}: {exc}") from None
    try:
        return _spec_of(document)
    except SpecError as exc:
        raise SpecError(f"job spec {path}: {exc}") from None


def _spec_of(document: Any) -> JobSpec:
    if not isinstance(document, dict) or document.get("format") != SPEC_FORMAT:
        raise SpecError(f"not a job spec (expected an object with format {SPEC_FORMAT!r})")
    version, package = document.get("version"), document.get("package_version")
    if version != SPEC_VERSION or package != __version__:
        raise SpecError(
            f"written by osu-dl-bench {describe(package)} (spec version {describe(version)}); "
            f"this is {__version__} (spec version {SPEC_VERSION}): rerun the sweep with "
            "one installation"
        )
    return _typed(JobSpec, document.get("spec"), "spec")


def _typed(cls: type, value: Any, where: str) -> Any:
    """An instance of the frozen dataclass ``cls`` from its JSON object ``value``, every
    field present, known and of its annotated kind."""
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected an object, got {describe(value)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}: unknown field")
    missing = [name for name in fields if name not in value]
    if missing:
        raise SpecError(f"{where}.{missing[0]}: missing")
    hints = typing.get_type_hints(cls)
    values = {name: _value(hints[name], value[name], f"{where}.{name}") for name in fields}
    try:
        return cls(**values)
    except SpecError as exc:
        raise SpecError(f"{where}.{exc}") from None


def _value(kind: Any, value: Any, where: str) -> Any:
    """``value`` as the annotated ``kind`` (str, int, float, bool, X | None, tuple[X, ...],
    a dataclass)."""
    if dataclasses.is_dataclass(kind):
        return _typed(kind, value, where)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and NULL in args:
            return None
        (kind,) = [arg for arg in args if arg is not NULL]
        return _value(kind, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise SpecError(f"{where}: expected a list, got {describe(value)}")
        return tuple(_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
    # JSON writes a float that holds a whole number (2.0) as 2.0, but a person may write 2.
    accepted = (float, int) if kind is float else kind
    if not is_kind(value, accepted):
        raise SpecError(f"{where}: expected {kind_text(kind)}, got {describe(value)}")
    return float(value) if kind is float else value
