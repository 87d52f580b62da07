"""What a sweep measures: each collective's variants from the registry (parameter grids
expanded), their eligibility at a process count, and the points still to measure.

Never names an algorithm: everything comes from the registry, whatever is registered.
Needs the registry, hence the MPI library, but no communication: the planner process
and every job run it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectives import (
    SPECS,
    CallContext,
    CollectiveSpec,
    Variant,
    algorithms,
    distinct_variants,
    mpich_layers,
    mpit,
)
from collectives.buffers import array_module
from collectives.dtypes import ElementType, element_type
from collectives.ops import ReduceOp, reduce_op
from collectives.registry import (
    NULL_CONTROL,
    NULL_CONTROL_APART,
    NULL_CONTROLS,
    lookup,
    null_control,
    parse_variant,
)
from collectives.shape import JobShape
from collectives.units import split_variant_texts
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.job_spec import Measurement
from osu_dl_bench.measurement.kernel import plan_variants
from osu_dl_bench.measurement.store import FOCUS_KEY, POINT_KEY, RunStore
from osu_dl_bench.runtime.launcher import posix_pinned
from osu_dl_bench.runtime.mpich_trees import candidate_files_env, generic_trees


def _distinct(variants: list[Variant]) -> list[Variant]:
    """One variant per label (a grid may repeat the default, -a may repeat a name)."""
    first: dict[str, Variant] = {}
    for variant in variants:
        first.setdefault(variant.label, variant)
    return list(first.values())


def with_null_controls(variants: list[Variant]) -> list[Variant]:
    """``variants`` with the null controls of plain native where native is among them:
    NULL_CONTROL beside it, and NULL_CONTROL_APART where a candidate is compared with native
    across launches (another backend's, a forced library algorithm)."""
    native = next((v for v in variants if v.label == "native"), None)
    if native is None:
        return variants
    nulls = [null_control(native, NULL_CONTROL)]
    if any(group_of(v) != MPI_GROUP for v in variants):
        nulls.append(null_control(native, NULL_CONTROL_APART))
    at = variants.index(native) + 1
    return [*variants[:at], *nulls, *variants[at:]]


def forced_alg(variant: Variant) -> str | None:
    """The library algorithm a ``native:alg=NAME`` variant forces (None: any other)."""
    params = getattr(variant, "params", None) or {}  # stand-ins of tests may have none
    if variant.algorithm.name != "native" or "alg" not in params:
        return None
    return str(params["alg"])


def _library_variants(collective: str, text: str) -> list[Variant] | None:
    """'native:alg=NAME' -> that library algorithm of ``collective`` ([] where the running
    library has none of that name for it), 'native:alg=all' -> every one of them but auto;
    None for any other text."""
    name, _, params = (t.strip() for t in text.partition(":"))
    key, _, alg = params.partition("=")
    if name != "native" or key.strip() != "alg":
        return None
    found = mpit.library_algorithms(collective)
    offered = [a.alg for a in found]
    every = [a.alg for a in found if not a.legacy]
    wanted = every if alg.strip() == "all" else [alg.strip()] if alg.strip() in offered else []
    return [parse_variant(collective, f"native:alg={each}") for each in wanted]


def variants_for(collective: str, algorithm_texts: list[str]) -> list[Variant]:
    """-a items -> this collective's variants. 'all' or a bare name sweeps grids;
    'NAME:k=v' is one variant ('native:alg=all': every algorithm the MPI library offers for
    it); names this collective lacks are ignored."""
    known = {a.name: a for a in algorithms(collective)}
    variants: list[Variant] = []
    if "all" in algorithm_texts:
        variants += [v for a in known.values() for v in a.grid_variants()]
    for text in algorithm_texts:
        name, colon, _ = (t.strip() for t in text.partition(":"))
        library = _library_variants(collective, text)
        if library is not None:
            variants += library
        elif name in known and colon:
            variants.append(parse_variant(collective, text))
        elif name in known and "all" not in algorithm_texts:
            variants += known[name].grid_variants()
    return _distinct(variants)


def _check_names(collectives: tuple[str, ...], algorithm_texts: list[str]) -> None:
    """Every name of -a must belong to some selected collective; a library algorithm
    (native:alg=NAME) to the running library's algorithms of one of them."""
    for text in algorithm_texts:
        name = text.partition(":")[0].strip()
        if name == "all":
            continue
        if text.replace(" ", "") in NULL_CONTROLS:
            raise UsageError(
                f"-a {text}: the null control is not a candidate; every sweep measures it "
                "beside native (--no-null skips it)"
            )
        if _library_variants(collectives[0], text) is not None:
            if not any(_library_variants(c, text) for c in collectives):
                alg = text.partition("=")[2].strip()
                mpit.library_algorithm(collectives[0], alg)  # its message names the choices
                raise UsageError(f"-a {text}: no selected collective has this algorithm")
            continue
        if not any(name in {a.name for a in algorithms(c)} for c in collectives):
            # lookup's message lists the names of the first collective
            lookup(collectives[0], name)


@dataclass(frozen=True)
class SweepSetting:
    """What stays fixed over a sweep: element type, op, array module, variants."""

    etype: ElementType
    op: ReduceOp | None
    xp: Any
    variants: dict[str, list[Variant]]  # collective -> its selected variants

    def op_for(self, spec: CollectiveSpec) -> ReduceOp | None:
        """The op for reductions, None for the others."""
        return self.op if spec.reduces else None

    def op_name(self, spec: CollectiveSpec) -> str | None:
        """The op's name as stored in results (None for collectives that do not reduce)."""
        op = self.op_for(spec)
        return op.name if op else None


def resolve_setting(measure: Measurement) -> SweepSetting:
    """Resolve and check every name of what the sweep measures; a UsageError says what is wrong."""
    etype = element_type(measure.dtype)
    reducing = [c for c in measure.collectives if SPECS[c].reduces]
    op = reduce_op(measure.op)
    if reducing:
        op.check_dtype(etype)
    if not any(measure.element_counts(c, etype.itemsize) for c in measure.collectives):
        raise UsageError(
            f"-m {measure.min_size}:{measure.max_size}: no size holds one {etype.name} element "
            f"({etype.itemsize} B)"
        )
    texts = split_variant_texts(measure.algorithms)
    _check_names(measure.collectives, texts)
    variants = {c: variants_for(c, texts) for c in measure.collectives}
    if measure.null_control:
        variants = {c: with_null_controls(vs) for c, vs in variants.items()}
    empty = [c for c, vs in variants.items() if not vs]
    if empty:
        raise UsageError(
            f"-a {measure.algorithms}: names no algorithm of {', '.join(empty)} "
            f"(see osu-dl-bench list {empty[0]})"
        )
    return SweepSetting(etype, op, array_module(measure.device), variants)


@dataclass(frozen=True)
class CollectivePlan:
    """One collective in one job's shape: sizes, runnable and skipped variants."""

    spec: CollectiveSpec
    counts: list[int]
    eligible: list[Variant]
    skipped: list[tuple[Variant, str]]
    shape: JobShape


# Isolation: a backend other than the MPI library's (gloo, NCCL) starts threads or helper
# processes that slow every other candidate timed in the same process (on 2 cores, native
# allreduce at 8 B went from 1.3 to 61 us once gloo was bound). Each such backend is
# measured in launches of its own, its "isolation group"; the MPI library's native runs in
# every group, so each candidate has a pair in its own launches.
MPI_GROUP = "mpi"
# A library algorithm (native:alg=NAME) is forced for a whole launch through the
# environment, so each is an isolation group of its own, 'alg_NAME' (of every collective
# that has NAME). There the plain native would be the forced algorithm again: it is not
# measured, and the tuner pairs the forced candidate with the MPI group's native by
# launch medians, as it pairs other backends.
FORCED_PREFIX = "alg_"
# The null control compared across launches (NULL_CONTROL_APART) runs in launches of its
# own, as those candidates do, and is paired with the MPI group's native the same way.
NULL_GROUP = "null"


def group_of(variant: Variant) -> str:
    """The isolation group a variant is measured in: its backend's name, alg_NAME for a
    library algorithm forced at launch, NULL_GROUP for the null control across launches."""
    if getattr(variant, "label", None) == NULL_CONTROL_APART:
        return NULL_GROUP
    alg = forced_alg(variant)
    return FORCED_PREFIX + alg if alg is not None else variant.algorithm.backend


# verify-export: the library's plain native with its selection file loaded, in launches of
# their own, against the MPI group's plain native without it.
FILE_GROUP = "library_file"


def sweep_groups(measure: Measurement, plans: list[CollectivePlan]) -> list[str]:
    """The isolation groups of a sweep: isolation_groups, and the selection file's where
    it measures one (verify-export)."""
    groups = isolation_groups(plans)
    return [*groups, FILE_GROUP] if measure.library_file and groups else groups


def is_forced_group(group: str | None) -> bool:
    """Whether ``group`` is a library algorithm's (its launches are forced)."""
    return group is not None and group.startswith(FORCED_PREFIX)


def in_group(variant: Variant, group: str | None) -> bool:
    """Whether a group's launches measure ``variant`` (every group measures native and its
    null control in rounds, except a forced one, where native is the forced algorithm, and
    the null group, which times its null control alone; None: every group, in one process,
    no group is the planner's view of every group at once)."""
    if group is None or group_of(variant) == group:
        return True
    plain_native = variant.algorithm.name == "native" and group_of(variant) == MPI_GROUP
    return plain_native and not is_forced_group(group) and group != NULL_GROUP


def forced_in(plans: list[CollectivePlan]) -> dict[str, str]:
    """collective -> the library algorithm a forced group's plans force."""
    return {
        plan.spec.name: alg
        for plan in plans
        for v in plan.eligible
        if (alg := forced_alg(v)) is not None
    }


# Where a sweep writes the MPICH selection files its launches load, one folder per
# isolation group, inside the run directory.
MPICH_FILES_DIR = "mpich_files"


def library_sweep(setting: SweepSetting) -> bool:
    """Whether a sweep measures MPICH's layered candidates (native:alg=NAME of
    collectives.mpich_layers): then every launch loads selection files."""
    return any(
        mpich_layers.is_candidate(collective, str(forced_alg(v)))
        for collective, variants in setting.variants.items()
        for v in variants
        if forced_alg(v) is not None
    )


def group_environment(
    plans: list[CollectivePlan], group: str, run_dir: str | None = None, library: bool = False
) -> dict[str, str]:
    """What a group's launches need in their environment: the variables that force its
    library algorithm (none for other groups). In a library sweep (``library``) under
    MPICH every group, the default's included, loads MPICH's three selection files, written
    into ``run_dir``: the generic trees, or a candidate's (runtime.mpich_trees), with
    MPIR_CVAR_COLLECTIVE_FALLBACK=error."""
    if library and run_dir is not None and _library(group) == "mpich":
        forced = forced_in(plans) if is_forced_group(group) else {}
        return candidate_files_env(Path(run_dir) / MPICH_FILES_DIR / group, forced)
    if not is_forced_group(group):
        return {}
    return mpit.forcing_environment(_library(group), forced_in(plans))


def _library(group: str) -> str:
    """The running library ('mpich', 'openmpi'), which group ``group`` needs."""
    library = mpit.running_library()
    if library is None:
        raise UsageError(f"group {group}: this MPI library's algorithms cannot be set")
    return library


def isolation_groups(plans: list[CollectivePlan]) -> list[str]:
    """The groups with an eligible candidate: the MPI library's first, then the others
    (the null group only beside a group whose candidates are paired across launches)."""
    found = {group_of(v) for plan in plans for v in plan.eligible}
    if not found - {MPI_GROUP, NULL_GROUP}:
        found.discard(NULL_GROUP)
    return [MPI_GROUP, *sorted(found - {MPI_GROUP})] if found else []


def plan_collectives(
    measure: Measurement, setting: SweepSetting, shape: JobShape, group: str | None = None
) -> list[CollectivePlan]:
    """Each collective's plan in one job's shape, for one isolation group's launches
    (None: every group)."""
    plans = []
    nprocs, nodes, ppn = shape.nprocs, shape.nodes, shape.ranks_per_node
    for name in measure.collectives:
        spec = SPECS[name]
        ctx = CallContext(nprocs, setting.etype, setting.op_for(spec), measure.device, nodes, ppn)
        counts = measure.element_counts(name, setting.etype.itemsize)
        sizes = [n * setting.etype.itemsize for n in counts]
        # MPICH's candidates that run the default's code everywhere have no launches of
        # their own: the MPI library's group lists them, with the reason.
        kept, same = mpich_default_paths(name, setting.variants[name], shape, sizes)
        plan = plan_variants([v for v in kept if in_group(v, group)], ctx)
        listed = same if group in (None, MPI_GROUP) else []
        plans.append(CollectivePlan(spec, counts, plan.eligible, [*plan.skipped, *listed], shape))
    return plans


def mpich_default_paths(
    collective: str, variants: list[Variant], shape: JobShape, sizes: list[int]
) -> tuple[list[Variant], list[tuple[Variant, str]]]:
    """The path proof before timing (collectives.mpich_layers): MPICH's candidates that
    run the default's code at every swept size in this job's shape are not measured
    (skipped with the reason); the others are. Other variants pass through."""
    forced = [v for v in variants if mpich_layers.is_candidate(collective, str(forced_alg(v)))]
    if not forced or not sizes or mpit.running_library() != "mpich":
        return variants, []
    base = generic_trees().trees
    pinned = posix_pinned(shape.ranks_per_node)
    call = mpich_layers.Call(collective, shape.nprocs, shape.nodes, sizes[0], oversubscribed=pinned)
    skipped = []
    for variant in forced:
        cand = mpich_layers.candidate(collective, str(forced_alg(variant)))
        same = mpich_layers.candidate_sizes(cand, call, sizes, base)
        if len(same) == len(sizes):
            skipped.append((variant, f"runs MPICH's default code at every size: {same[sizes[0]]}"))
    gone = {id(v) for v, _ in skipped}
    return [v for v in variants if id(v) not in gone], skipped


@dataclass(frozen=True)
class LaunchSlot:
    """Which launch of which isolation group a job measures."""

    launch: int
    group: str


def point_key(
    measure: Measurement,
    setting: SweepSetting,
    plan: CollectivePlan,
    variant: Variant,
    n: int,
    slot: LaunchSlot,
) -> tuple:
    """The store's key (POINT_KEY order) of one candidate at one point of one launch."""
    fields = {
        "launch": slot.launch,
        "group": slot.group,
        "nprocs": plan.shape.nprocs,
        "nodes": plan.shape.nodes,
        "ppn": plan.shape.ranks_per_node,
        "collective": plan.spec.name,
        "backend": variant.algorithm.backend,
        "algorithm": variant.label,
        "dtype": setting.etype.name,
        "op": setting.op_name(plan.spec),
        "device": measure.device,
        "size_bytes": n * setting.etype.itemsize,
    }
    return tuple(fields[k] for k in POINT_KEY)


@dataclass(frozen=True)
class Done:
    """What a launch need not measure: the stored points (POINT_KEY order), and, in the
    extra launches of an adaptive sweep, every candidate outside the launch's focus."""

    stored: frozenset = frozenset()
    focus: Mapping[int, frozenset] = field(default_factory=dict)

    def __contains__(self, key: object) -> bool:
        if key in self.stored:
            return True
        fields_ = dict(zip(POINT_KEY, key, strict=True))  # type: ignore[arg-type]
        wanted = self.focus.get(fields_["launch"])
        return wanted is not None and tuple(fields_[k] for k in FOCUS_KEY) not in wanted

    def focused(self, launch: int) -> bool:
        """Whether the launch measures only its focus."""
        return launch in self.focus

    def native_alone(self, launch: int, nprocs: int, collective: str, size: int) -> bool:
        """Whether a focused launch's focus holds nothing but native (and its null controls)
        at this point (native measured then compares with nothing; where another group's
        candidate is in focus, native is its clean reference and must run)."""
        wanted = self.focus.get(launch, frozenset())
        return not any(
            (p, c, s) == (nprocs, collective, size) and not is_native_copy(a)
            for p, c, s, a in wanted
        )

    def without_stored(self) -> Done:
        """The same focus with nothing stored (a re-measurement times the whole point)."""
        return Done(frozenset(), self.focus)


def is_native_copy(label: str) -> bool:
    """Whether a label is plain native or one of its null controls."""
    return label == "native" or label in NULL_CONTROLS


def finished_points(store: RunStore) -> Done:
    """The stored points' keys, and the focus of an adaptive sweep's extra launches."""
    return Done(frozenset(store.finished_points()), store.read_focus())


def pending(
    measure: Measurement,
    setting: SweepSetting,
    plan: CollectivePlan,
    n: int,
    done: set,
    slot: LaunchSlot,
) -> list[Variant]:
    """The eligible variants with no stored result at this point in this launch, less
    twins (variants whose chunk or segment size has no effect at this size run the same
    code: timing them twice costs time and lets noise pick between equals)."""
    distinct = distinct_variants(plan.eligible, plan.shape.nprocs, n, setting.etype.itemsize)
    todo = [v for v in distinct if point_key(measure, setting, plan, v, n, slot) not in done]
    # Native alone (with its null controls) compares with nothing: a focused launch skips
    # the point; the null group's launches re-measure where the MPI group's native runs.
    alone = all(is_native_copy(v.label) for v in todo)
    if alone and isinstance(done, Done) and done.focused(slot.launch):
        size = n * setting.etype.itemsize
        if slot.group not in (MPI_GROUP, NULL_GROUP) or done.native_alone(
            slot.launch, plan.shape.nprocs, plan.spec.name, size
        ):
            return []
    return todo


@dataclass(frozen=True)
class JobPlan:
    """Points of one launch of one process count and isolation group: how many in all,
    and how many still to measure."""

    nprocs: int
    points: int
    todo: int
    skipped: list[dict[str, str]]
    launch: int = 1
    group: str = MPI_GROUP
    # The variables a forced group's launch is started with (group_environment).
    env: dict[str, str] = field(default_factory=dict)


def job_plan(
    measure: Measurement,
    run_dir: str,
    setting: SweepSetting,
    nprocs: int,
    plans: list[CollectivePlan],
    done: set,
    slot: LaunchSlot,
) -> JobPlan:
    """Count the points (one per collective and size with an eligible candidate)."""
    points = todo = 0
    for plan in plans:
        if not plan.eligible:
            continue
        points += len(plan.counts)
        todo += sum(1 for n in plan.counts if pending(measure, setting, plan, n, done, slot))
    skipped = [
        {
            "collective": plan.spec.name,
            "backend": v.algorithm.backend,
            "algorithm": v.label,
            "reason": reason,
        }
        for plan in plans
        for v, reason in plan.skipped
    ]
    env = group_environment(plans, slot.group, run_dir, library_sweep(setting))
    if slot.group == FILE_GROUP and measure.library_file:
        env = mpit.selection_file_environment(_library(slot.group), measure.library_file)
    return JobPlan(nprocs, points, todo, skipped, slot.launch, slot.group, env)


def forcing_proof(plans: list[CollectivePlan], group: str) -> dict[str, dict[str, str]]:
    """In a forced group's launch: each forcing variable as set and as the library reads it
    back through MPI_T (recorded in the launch's metadata). A variable that does not read
    back as its algorithm (the launch was not started with it: --inside by hand) is a
    UsageError naming what to set, on every rank alike."""
    proof = {}
    for collective, alg in forced_in(plans).items():
        problem = mpit.forcing_problem(collective, alg)
        if problem is not None:
            raise UsageError(f"group {group}: {problem}", agreed=True)
        wanted = mpit.library_algorithm(collective, alg)
        if (
            mpit.running_library() == "mpich" and not wanted.legacy
        ):  # files, not an MPI_T variable, set it
            proof[f"{collective} {wanted.variable}"] = {
                "set": wanted.value,
                "read": os.environ.get(wanted.variable, ""),
                "files": {v: os.environ.get(v, "") for v in mpit.MPICH_FILE_VARIABLES},
            }
            continue
        proof[wanted.variable] = {"set": wanted.value, "read": mpit.current_choice(wanted.variable)}
    return proof
