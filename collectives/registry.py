"""The one registry through which the harness, sweep, tuner, selector and trainer reach
every collective algorithm.

An algorithm is a factory ``factory(comm, **params) -> call`` where
``call(sendbuf, recvbuf, op, root)`` performs one collective on numpy (or cupy) buffers;
``sendbuf is None`` means in place (see ``specs.Buffers``). The factory runs once per
communicator, so algorithms can keep a private duplicate communicator and scratch space.
Constraints are data (``Requirement``): an ineligible algorithm is reported as skipped
with the reason and can never be selected.
"""

from __future__ import annotations

import inspect
import itertools
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import Any

from collectives.buffers import is_host
from collectives.device import for_backend
from collectives.dtypes import ElementType
from collectives.errors import UsageError
from collectives.ops import ReduceOp
from collectives.powers import is_power_of_two
from collectives.shape import JobShape
from collectives.specs import SPECS
from collectives.units import format_size, parse_size, split_variant_texts

CollectiveCall = Callable[[Any, Any, "ReduceOp | None", int], None]
Factory = Callable[..., CollectiveCall]


@dataclass(frozen=True)
class CallContext:
    """What eligibility depends on: the job and the call's element type, op and device."""

    nprocs: int
    etype: ElementType
    op: ReduceOp | None
    device: str = "cpu"
    nodes: int = 1
    ppn: int = 1  # ranks per node, as Topology, Query and the tables name it

    @property
    def shape(self) -> JobShape:
        """The job's shape the call runs in."""
        return JobShape(self.nprocs, self.nodes, self.ppn)


@dataclass(frozen=True)
class Requirement:
    """A precondition of an algorithm, with the reason shown when it does not hold."""

    reason: str
    holds: Callable[[CallContext], bool]


COMMUTATIVE_OP = Requirement("needs a commutative op", lambda c: c.op is None or c.op.commutative)
POWER_OF_TWO = Requirement(
    "needs a power-of-two process count", lambda c: is_power_of_two(c.nprocs)
)
CPU_BUFFERS = Requirement("needs host (cpu) buffers", lambda c: is_host(c.device))


# Chunk and segment sizes are refused outside these bounds wherever a variant is named
# (-a, tuning tables, the selector's forcing): a 1-byte chunk turned a 1 MiB allreduce
# from 0.2 ms into 1.4 s, and no message this suite allocates needs a piece above 1 GiB.
MIN_PIECE_BYTES = 4 << 10
MAX_PIECE_BYTES = 1 << 30
# Other byte-count parameters: what MPI's counts can hold.
MAX_PARAM_BYTES = (1 << 63) - 1


@dataclass(frozen=True)
class Split:
    """A size parameter that cuts one unit of the message into pieces (a chunk or segment
    size). Where the unit fits in one piece the parameter has no effect: variants
    differing only there run the same code (twins)."""

    param: str
    # (p, n elements) -> elements of the unit the parameter cuts: the whole message, or
    # the largest of the p blocks.
    unit: Callable[[int, int], int]
    # True where a piece of under one element means "do not cut" (the ring's seg=0); else
    # the algorithm cuts pieces of at least one element, as max(1, bytes // itemsize).
    zero_means_whole: bool = False
    # The piece sizes the parameter accepts (0 too where it means whole).
    least: int = MIN_PIECE_BYTES
    most: int = MAX_PIECE_BYTES

    def allows(self, nbytes: int) -> bool:
        """Whether ``nbytes`` is a piece size this parameter accepts."""
        return (nbytes == 0 and self.zero_means_whole) or self.least <= nbytes <= self.most

    def expected(self) -> str:
        """The accepted values, in words."""
        span = f"a size from {format_size(self.least)} to {format_size(self.most)}"
        return f"0 (whole blocks) or {span}" if self.zero_means_whole else span


def whole_message(p: int, n: int) -> int:
    """The unit is the whole message (a chunked broadcast or shared-memory pass)."""
    return n


def largest_block(p: int, n: int) -> int:
    """The unit is the largest of the p blocks (a ring or a reduce-scatter)."""
    return -(-n // max(p, 1))


GPU_BUFFERS = Requirement("needs GPU (cuda) buffers", lambda c: c.device == "cuda")
SINGLE_NODE = Requirement("needs all ranks on one node", lambda c: c.nodes == 1)
# Node-aware designs: on one node they reduce to their intra-node step, which is already
# registered on its own (shm); timing it twice only adds a tied twin to every sweep.
SEVERAL_NODES = Requirement(
    "needs ranks on more than one node (on one node it is the shm algorithm)",
    lambda c: c.nodes > 1,
)


# The MPI libraries whose own algorithms ours are matched with (Algorithm.equivalents):
# Open MPI's coll/tuned component, MPICH's MPIR-level collectives and the POSIX
# shared-memory collectives of MPICH's ch4 device, which answer first on one node.
LIBRARIES = ("openmpi", "mpich", "mpich_posix")


@dataclass(frozen=True)
class Counterpart:
    """An MPI library's own algorithm of the same design as a registered one."""

    # The library's name for it: the value of Open MPI's coll_tuned_<coll>_algorithm,
    # MPICH's MPIR function, MPICH ch4's MPIR_CVAR_<COLL>_POSIX_INTRA_ALGORITHM value.
    name: str
    # The library's number for it, where its rule files use numbers (Open MPI's coll/tuned
    # ids, ompi/mca/coll/tuned/coll_tuned_<coll>_decision.c).
    id: int | None = None
    # Our parameters under which both run the same schedule (MPICH's ring does not
    # segment: seg=0): the performance model costs the library's algorithm as this variant.
    params: Mapping[str, int | str] = field(default_factory=dict)
    # The library's fan-in/out for the algorithm (Open MPI's chain: the number of chains).
    fanout: int = 0
    # Our parameter that gives the library's segment size (Open MPI's chain: seg).
    segment: str | None = None
    # Whether a tuning table's choice of our algorithm is written into the library's
    # selection file as this one: not where the library runs it only under a condition
    # the file's rules cannot state.
    exported: bool = True


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm of one collective."""

    collective: str
    name: str
    factory: Factory
    backend: str = "mpi"
    summary: str = ""
    requires: tuple[Requirement, ...] = ()
    # Parameters: byte counts (ints, shown as '256K') or names (str, e.g. an inner algorithm).
    defaults: Mapping[str, int | str] = field(default_factory=dict)
    # Values the sweep tries for each parameter.
    grid: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    # cost(machine, p, n_bytes, **params) -> seconds, machine a common.Machine
    # (Thakur, Rabenseifner and Gropp, IJHPCA 2005).
    cost: Callable[..., float] | None = None
    # Raises UsageError for parameter values that can never work (an unknown inner name),
    # so `-a` fails before anything runs.
    check_params: Callable[[Mapping[str, int | str]], None] | None = None
    # (ctx, params) -> None if the variant can run in ctx, else why not; for eligibility
    # that depends on parameters (an inner algorithm's own requirements).
    param_reason: Callable[[CallContext, Mapping[str, int | str]], str | None] | None = None
    # The size parameter that has no effect once one piece holds its unit (see Split).
    split: Split | None = None
    # Whether every rank copies at the same time in most steps (an allgather after a
    # scatter, the CMA bcast's parallel block copies) or only a tree's front does (binomial
    # fan-out or fan-in). None: as the collective, symmetric ones busy, rooted ones a tree.
    # The performance model charges busy algorithms the contention of all the node's
    # ranks. (Declared where it made the model more accurate on two separate sweeps; the
    # chain and the shm bcast, whose peers mostly wait on the root, fit the tree state.)
    all_ranks_busy: bool | None = None
    # The MPI libraries' own algorithms of the same design, by library (LIBRARIES): the
    # exports translate tuning tables with them, the model costs ``native`` with them.
    equivalents: Mapping[str, Counterpart] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Defaults, a grid or counterparts outside the parameters' own bounds are a
        # registration bug.
        try:
            for name in self.grid:
                if name not in self.defaults:
                    raise UsageError(f"grid parameter {name} has no default")
                for value in self.grid[name]:
                    self.param_value(name, value)
            for name, value in self.defaults.items():
                self.param_value(name, value)
            for library, counterpart in self.equivalents.items():
                self._check_counterpart(library, counterpart)
        except UsageError as exc:
            raise ValueError(f"algorithm {self.name!r} of {self.collective}: {exc}") from None

    def _check_counterpart(self, library: str, counterpart: Counterpart) -> None:
        if library not in LIBRARIES:
            raise UsageError(f"unknown library {library!r}: expected one of {LIBRARIES}")
        if library == "openmpi" and counterpart.id is None:
            raise UsageError("an Open MPI counterpart needs its coll/tuned id")
        named = [*counterpart.params, *filter(None, [counterpart.segment])]
        unknown = [name for name in named if name not in self.defaults]
        if unknown:
            raise UsageError(f"{library} counterpart names no parameter {', '.join(unknown)}")
        for name, value in counterpart.params.items():
            self.param_value(name, value)

    def param_value(self, name: str, value: Any) -> int | str:
        """``value`` checked against parameter ``name``: of its default's kind (a byte count
        or a name) and, for the split parameter, within the piece-size bounds."""
        if isinstance(self.defaults[name], str):
            if not isinstance(value, str) or not value:
                raise UsageError(f"{self.name}: {name} expects an algorithm name, got {value!r}")
            return value
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise UsageError(f"{self.name}: {name} expects a whole number of bytes, got {value!r}")
        split = self.split if self.split is not None and self.split.param == name else None
        if split is not None and not split.allows(value):
            raise UsageError(
                f"{self.name}: {name} expects {split.expected()}, got {format_size(value)}"
            )
        if value > MAX_PARAM_BYTES:
            raise UsageError(f"{self.name}: {name} expects at most {MAX_PARAM_BYTES}, got {value}")
        return value

    def parse_param(self, name: str, text: str) -> int | str:
        """A parameter's value from -a text: a size ('256K') or a name, as its default."""
        text = text.strip()
        default = self.defaults.get(name)
        if not isinstance(default, int):
            return text  # a name, or an unknown parameter that variant() names
        try:
            return parse_size(text)
        except UsageError:
            raise UsageError(
                f"{self.name}: {name} expects a size such as {format_size(default)}, got {text!r}"
            ) from None

    def busy_everywhere(self) -> bool:
        """all_ranks_busy, or the collective's default when the algorithm does not say."""
        if self.all_ranks_busy is not None:
            return self.all_ranks_busy
        return not SPECS[self.collective].rooted

    def grid_variants(self) -> list[Variant]:
        """Every variant of the cartesian product of the parameter grid (parameters outside
        the grid keep their defaults; no grid: the default variant)."""
        names = list(self.grid)
        values = itertools.product(*(self.grid[name] for name in names))
        return [self.variant(**dict(zip(names, combo, strict=True))) for combo in values]

    def variant(self, **params: int | str) -> Variant:
        """This algorithm with parameters bound (defaults for the ones not given)."""
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise UsageError(
                f"algorithm {self.name!r} of {self.collective} has no parameter "
                f"{', '.join(sorted(unknown))}: expected {', '.join(self.defaults) or 'none'}"
            )
        checked = {name: self.param_value(name, value) for name, value in params.items()}
        bound = MappingProxyType({**self.defaults, **checked})
        if self.check_params is not None:
            self.check_params(bound)
        return Variant(self, bound)


@dataclass(frozen=True)
class Variant:
    """An algorithm with its parameters bound: the unit that is timed and selected."""

    algorithm: Algorithm
    params: Mapping[str, int | str]

    @property
    def label(self) -> str:
        """Name with parameters, as results and tables spell it: 'chain:seg=256K'."""
        if not self.params:
            return self.algorithm.name
        return f"{self.algorithm.name}:{format_params(self.params)}"

    def ineligible_reason(self, ctx: CallContext) -> str | None:
        """None if the variant can run in this context, else why not."""
        for requirement in self.algorithm.requires:
            if not requirement.holds(ctx):
                return requirement.reason
        check = self.algorithm.param_reason
        return check(ctx, self.params) if check is not None else None

    def bind(self, comm: Any) -> CollectiveCall:
        """Prepare the variant on a communicator; returns the per-call function."""
        return self.algorithm.factory(comm, **self.params)

    def pieces_per_unit(self, p: int, count: int, itemsize: int) -> int:
        """How many pieces the split parameter cuts its unit into (1: it has no effect)."""
        split = self.algorithm.split
        if split is None:
            return 1
        step = int(self.params[split.param]) // max(itemsize, 1)
        if step <= 0 and split.zero_means_whole:
            return 1
        step = max(step, 1)
        unit = split.unit(p, count)
        return 1 if step >= unit else -(-unit // step)

    def twin_key(self, p: int, count: int, itemsize: int) -> tuple:
        """Equal for variants that run the same code on ``count`` elements over p ranks."""
        split = self.algorithm.split
        if split is None or self.pieces_per_unit(p, count, itemsize) > 1:
            return (self.algorithm.name, tuple(self.params.items()))
        rest = tuple((k, v) for k, v in self.params.items() if k != split.param)
        return (self.algorithm.name, rest, "whole")


# The null control: native measured a second time under another label, an A/A pair that
# goes through every statistic and the decision rule as a candidate would, so a sweep
# reports how often noise alone would have picked a "winner" (Hoefler and Belli, SC15:
# name the noise before claiming a difference). NULL_CONTROL shares native's launches
# and rounds (each round times it in its own slot); NULL_CONTROL_APART runs in launches
# of its own, paired with native by launch medians as another backend's candidates and
# the library's forced algorithms are. Neither is a twin of native, nor ever a choice.
NULL_CONTROL = "native:null"
NULL_CONTROL_APART = "native:null_apart"
NULL_CONTROLS = (NULL_CONTROL, NULL_CONTROL_APART)


def is_null_control(label: str) -> bool:
    """Whether a result's algorithm label is a null control (never a candidate)."""
    return label in NULL_CONTROLS


@dataclass(frozen=True)
class NullControl(Variant):
    """Native's variant under a null control's label: it binds and runs native's code."""

    name: str = NULL_CONTROL

    @property
    def label(self) -> str:
        """The null control's label (NULL_CONTROLS), as results spell it."""
        return self.name

    def twin_key(self, p: int, count: int, itemsize: int) -> tuple:
        """Its own key: the null control is never merged with native as a twin."""
        return (self.name,)


def null_control(native: Variant, name: str = NULL_CONTROL) -> NullControl:
    """The null control ``name`` of a plain native variant."""
    if native.algorithm.name != "native" or native.params or name not in NULL_CONTROLS:
        raise ValueError(f"a null control copies plain native, got {native.label} as {name}")
    return NullControl(native.algorithm, native.params, name)


def _split_value(variant: Variant) -> int:
    """The split parameter's value for ordering twins; 0 counts as the largest where it
    means "whole" (Split.zero_means_whole)."""
    split = variant.algorithm.split
    if split is None:
        return 0
    value = int(variant.params[split.param])
    return 1 << 62 if value <= 0 and split.zero_means_whole else value


def distinct_variants(variants: list[Variant], p: int, count: int, itemsize: int) -> list[Variant]:
    """``variants`` less their twins at this point, in their order. Of each set of twins
    the one with the largest split parameter stays, so that the name a tuning table
    gives one behaviour stays the same across sizes."""
    keeper: dict[tuple, Variant] = {}
    for variant in variants:
        key = variant.twin_key(p, count, itemsize)
        if key not in keeper or _split_value(variant) > _split_value(keeper[key]):
            keeper[key] = variant
    kept = {id(v) for v in keeper.values()}
    return [v for v in variants if id(v) in kept]


def format_params(params: Mapping[str, int | str]) -> str:
    """'seg=256K,inner=ring': sizes with K/M/G suffixes, names as they are."""
    return ",".join(f"{k}={format_size(v) if isinstance(v, int) else v}" for k, v in params.items())


class BoundCalls:
    """Each variant bound once per communicator and reused. Binding is collective (it may
    duplicate the communicator or build scratch): every rank binds the same variants in
    the same order."""

    def __init__(self) -> None:
        self._calls: dict[tuple, CollectiveCall] = {}

    def get(self, comm: Any, variant: Variant) -> CollectiveCall:
        """The bound call of ``variant`` on ``comm``, binding it on first use."""
        key = (comm.py2f(), variant.algorithm.collective, variant.label)
        if key not in self._calls:
            self._calls[key] = variant.bind(comm)
        return self._calls[key]

    def calls(self, comm: Any, variants: Sequence[Variant]) -> list[CollectiveCall]:
        """The bound calls of ``variants`` on ``comm``, in their order."""
        return [self.get(comm, v) for v in variants]


_REGISTRY: dict[tuple[str, str], Algorithm] = {}
_loaded = False
# Backends whose library or device is missing: name -> reason, for `osu-dl-bench list`.
UNAVAILABLE_BACKENDS: dict[str, str] = {}


# *args and **kwargs name no parameter a variant could bind.
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def signature_defaults(factory: Factory) -> dict[str, int | str]:
    """The parameters of ``factory(comm, ...)`` after the communicator with their defaults:
    an algorithm's parameters and defaults, stated once, in its signature."""
    params = list(inspect.signature(factory).parameters.values())[1:]
    bare = [p.name for p in params if p.default is p.empty or p.kind in _VARIADIC]
    if bare:
        raise ValueError(f"{factory.__qualname__}: parameter {', '.join(bare)} needs a default")
    return {p.name: p.default for p in params}


def register(
    collective: str, name: str, algorithm_class: type[Algorithm] | None = None, **fields: Any
) -> Callable[[Factory], Factory]:
    """Decorator registering ``factory`` as algorithm ``name`` of ``collective``
    (``algorithm_class``: an Algorithm subclass whose variants differ, e.g. native's); its
    parameters' defaults are those of the factory's signature (signature_defaults)."""
    if collective not in SPECS:
        raise ValueError(f"unknown collective {collective!r}")
    if "defaults" in fields:
        raise ValueError(
            f"algorithm {name!r} of {collective}: state parameter defaults once, in the "
            "factory's signature, not also in register()"
        )

    def decorate(factory: Factory) -> Factory:
        key = (collective, name)
        if key in _REGISTRY:
            raise ValueError(f"algorithm {name!r} of {collective} is registered twice")
        cls = algorithm_class or Algorithm
        defaults = signature_defaults(factory)
        _REGISTRY[key] = cls(collective, name, factory, defaults=defaults, **fields)
        return factory

    return decorate


def algorithm_modules(package: str = __package__) -> list[str]:
    """The modules that may register algorithms: every module of ``package`` in name order,
    then those of each subpackage (``backends``) in turn; names starting with '_' are left
    out. A new algorithm file is found here, with no list to edit; the import order is the
    registration order `osu-dl-bench list` and `-a all` show (after native)."""
    found = list(pkgutil.iter_modules(import_module(package).__path__))
    public = sorted((m for m in found if not m.name.startswith("_")), key=lambda m: m.name)
    modules = [f"{package}.{m.name}" for m in public if not m.ispkg]
    for sub in (m for m in public if m.ispkg):
        modules += algorithm_modules(f"{package}.{sub.name}")
    return modules


def load_algorithms() -> None:
    """Import every module of the package once (algorithm_modules), registering its
    algorithms; the first question to the registry does this, so importing collectives or
    one of its modules loads no algorithm."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in algorithm_modules():
        import_module(module)


def _native_first(algos: list[Algorithm]) -> list[Algorithm]:
    # The MPI library's own algorithm is the baseline everything is compared with.
    return sorted(algos, key=lambda a: a.name != "native")


def algorithms(collective: str) -> list[Algorithm]:
    """Every registered algorithm of a collective: native first, then registration order."""
    load_algorithms()
    return _native_first([a for (c, _), a in _REGISTRY.items() if c == collective])


def all_algorithms() -> list[Algorithm]:
    """Every registered algorithm, grouped by collective in the order of SPECS."""
    return [a for name in SPECS for a in algorithms(name)]


def lookup(collective: str, name: str) -> Algorithm:
    """The algorithm ``name`` of ``collective``, or a UsageError naming the choices."""
    load_algorithms()
    if (collective, name) not in _REGISTRY:
        # 'gloo', 'nccl', 'nccl_hierarchical': named after a backend missing here.
        backend = name.split("_")[0]
        if backend in UNAVAILABLE_BACKENDS:
            raise UsageError(
                f"algorithm {name!r} of {collective} is not available here: "
                f"{UNAVAILABLE_BACKENDS[backend]}"
            )
        names = ", ".join(a.name for a in algorithms(collective))
        raise UsageError(f"unknown algorithm {name!r} for {collective}: expected one of {names}")
    return _REGISTRY[(collective, name)]


def counterpart(collective: str, name: str, library: str) -> Counterpart | None:
    """``library``'s algorithm of the same design as our algorithm ``name``, or None (none
    declared, or ``name`` not registered here: a table from another machine may name it)."""
    load_algorithms()
    algo = _REGISTRY.get((collective, name))
    return None if algo is None else algo.equivalents.get(library)


def algorithm_like(
    collective: str, library: str, name: str
) -> tuple[Algorithm, Counterpart] | None:
    """Our algorithm whose ``library`` counterpart is named ``name``, with that counterpart;
    None if no registered algorithm declares it."""
    for algo in algorithms(collective):
        found = algo.equivalents.get(library)
        if found is not None and found.name == name:
            return algo, found
    return None


def parse_variant(collective: str, text: str) -> Variant:
    """Parse 'ring' or 'chain:seg=256K' into a variant of ``collective``."""
    name, _, arg_text = text.partition(":")
    algo = lookup(collective, name.strip())
    params: dict[str, int | str] = {}
    for item in filter(None, arg_text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"bad parameter {item!r} in {text!r}: expected NAME=VALUE")
        if key.strip() in params:
            # Keeping the last silently would measure something other than was asked.
            raise UsageError(f"parameter {key.strip()} given twice in {text!r}")
        params[key.strip()] = algo.parse_param(key.strip(), value)
    return algo.variant(**params)


def twin_representatives(
    collective: str, labels: list[str], p: int, count: int, itemsize: int
) -> dict[str, str]:
    """Each label -> the label distinct_variants keeps of its twins at this point; labels
    not registered here map to themselves (results of other machines, older runs)."""
    parsed: dict[str, Variant] = {}
    for label in labels:
        try:
            parsed[label] = parse_variant(collective, label)
        except UsageError:
            continue
    kept = distinct_variants(list(parsed.values()), p, count, itemsize)
    by_key = {v.twin_key(p, count, itemsize): v.label for v in kept}
    return {
        label: by_key[parsed[label].twin_key(p, count, itemsize)] if label in parsed else label
        for label in labels
    }


def parse_variants(collective: str, text: str) -> list[Variant]:
    """Parse the -a option: 'all' or a comma list where ':' starts a variant's parameters.

    'native,chain:seg=64K,ring' -> three variants; parameters after ':' are separated
    by ',' too, so a bare name after a parameter starts a new variant.
    """
    if text.strip() == "all":
        return [a.variant() for a in algorithms(collective)]
    specs = split_variant_texts(text)
    if not specs:
        raise UsageError("no algorithm named in -a")
    # One variant named twice would be measured twice: keep its first mention.
    unique: dict[str, Variant] = {}
    for spec in specs:
        variant = parse_variant(collective, spec)
        unique.setdefault(variant.label, variant)
    return list(unique.values())


def for_device(
    call: CollectiveCall, algorithm: Algorithm, device: str, rank: int
) -> CollectiveCall:
    """``algorithm``'s bound ``call`` as it must run on ``device`` buffers on ``rank``: staged
    through host memory where its backend needs it (collectives.device.for_backend),
    copying only what its collective reads and writes on that rank (its spec's flow)."""
    return for_backend(call, algorithm.backend, device, SPECS[algorithm.collective].flow, rank)
