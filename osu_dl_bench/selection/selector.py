"""The runtime selector: per call, the algorithm a tuning table chose for
(collective, comm size, ppn, nodes, bytes, buffer kind).

Order of precedence, the one decision chain of bench ``-a tuned``, ``select`` and the
trainer (forced -> fixed -> table -> model -> native):

1. a forced algorithm (``force=`` or ``OSU_DL_BENCH_FORCE_ALGORITHM``, e.g.
   ``allreduce=ring,bcast=chain:seg=256K``);
2. a fixed algorithm (``fixed=``: the trainer's ``--allreduce`` and ``--bcast``), which
   is an error where it cannot run, not a silent fallback;
3. the table entry of the call's shape; outside the table's comm shapes the nearest
   entry (closest comm size, then nodes, then ppn; ties to the smaller comm size) unless
   the ``model`` hook (the analytical model, osu_dl_bench.model.selection) answers;
   outside the measured sizes the first or last range, which reach 0 and infinity; a
   call on registered buffers (``cpu-registered``) takes the ``cpu`` entries when the
   table has none of its own (HOST_FALLBACK);
4. with no table, the ``model`` hook if given;
5. native, with no table (and no model) or no entry for the collective and buffer kind.

Whatever is chosen must be eligible in the call's context (``Variant.ineligible_reason``);
if it is not, native runs instead. ``bind`` precomputes everything per communicator so a
call costs one dict lookup; every variant is bound once per communicator (``BoundCalls``).
"""

from __future__ import annotations

import copy
import math
import os
import sys
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from collectives import SPECS, Algorithm, CallContext, Variant, lookup
from collectives.device import CudaAwareness, cuda_awareness
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.registry import (
    BoundCalls,
    CollectiveCall,
    for_device,
    parse_variant,
    parse_variants,
)
from collectives.shape import JobShape
from collectives.units import format_size, split_variant_texts
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.names import FORCE_ENV
from osu_dl_bench.selection.table import (
    Choice,
    Entry,
    SizeRange,
    TuningTable,
    load_table,
    measured_mpi_cuda,
)

TUNED = "tuned"
# Buffer kinds a table may answer for with another kind's entries when it has none of its own.
HOST_FALLBACK = {"cpu-registered": "cpu"}


@dataclass(frozen=True)
class Query:
    """One call as the selector sees it."""

    collective: str
    nprocs: int
    nbytes: int
    device: str = "cpu"
    nodes: int = 1
    ppn: int | None = None

    @property
    def shape(self) -> JobShape:
        """The job's shape this call runs in."""
        return JobShape(self.nprocs, self.nodes, self.ppn)

    @property
    def ranks_per_node(self) -> int:
        """ppn, or the ranks spread evenly over the nodes when not given."""
        return self.shape.ranks_per_node


# model(query) -> a choice, or None to use the nearest measured entry.
Model = Callable[[Query], "Choice | None"]


@dataclass(frozen=True)
class Decision:
    """What the selector picked for a query, how, and why."""

    variant: Variant
    how: str  # forced | table | nearest | model | native
    reason: str
    entry: Entry | None = None
    size_range: SizeRange | None = None

    @property
    def label(self) -> str:
        """The chosen variant's label."""
        return self.variant.label


def parse_force(text: str, source: str = FORCE_ENV) -> dict[str, str]:
    """'allreduce=ring,bcast=chain:seg=256K' -> {'allreduce': 'ring', 'bcast': 'chain:seg=256K'}.

    Parameters after ':' are separated by ',' too: an item whose key is not a collective
    continues the previous algorithm's parameters.
    """
    forced: dict[str, str] = {}
    last = None
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, sep, value = item.partition("=")
        if sep and key.strip() in SPECS:
            last = key.strip()
            forced[last] = value.strip()
        elif sep and last is not None:
            forced[last] += "," + item
        else:
            raise UsageError(
                f"{source}: bad item {item!r}: expected COLLECTIVE=ALGORITHM[:PARAM=VALUE,...] "
                f"with a collective among {', '.join(SPECS)}"
            )
    return forced


def default_context(query: Query, dtype: str = "float32", op: str = "sum") -> CallContext:
    """The context eligibility is judged in when the caller gives none."""
    spec = SPECS[query.collective]
    return CallContext(
        query.nprocs,
        element_type(dtype),
        reduce_op(op) if spec.reduces else None,
        query.device,
        query.nodes,
        query.ranks_per_node,
    )


def message_bytes(collective: str, nprocs: int) -> Callable[[Any, Any], int]:
    """f(send, recv) -> the per-rank message size in bytes, as sweeps and tables count it."""
    spec = SPECS[collective]
    per_send = spec.send_elems(1, nprocs)
    per_recv = spec.recv_elems(1, nprocs)
    in_place = spec.recv_elems_in_place or spec.recv_elems
    per_recv_in_place = in_place(1, nprocs)

    def size(send: Any, recv: Any) -> int:
        if send is not None and per_send:
            return send.nbytes // per_send
        per = per_recv if send is not None else per_recv_in_place
        return recv.nbytes // per if recv is not None and per else 0

    return size


def _distance(entry: Entry, query: Query) -> tuple[int, int, int, int]:
    """Order of nearness of an entry to a query (smaller is nearer)."""
    k = entry.key
    return (
        abs(k.nprocs - query.nprocs),
        abs(k.nodes - query.nodes),
        abs(k.ppn - query.ranks_per_node),
        k.nprocs,
    )


def _is_exact(entry: Entry, query: Query) -> bool:
    return _distance(entry, query)[:3] == (0, 0, 0)


class Selector:
    """Chooses an algorithm per call from a tuning table (or native without one)."""

    def __init__(
        self,
        table: TuningTable | None = None,
        force: Mapping[str, str] | None = None,
        model: Model | None = None,
        force_source: str = "the caller",
        fixed: Mapping[str, Variant] | None = None,
    ) -> None:
        self.table = table
        self.model = model
        self.force_source = FORCE_ENV if force is None else force_source
        texts = parse_force(os.environ.get(FORCE_ENV, "")) if force is None else force
        self.forced = self._forced_variants(texts)
        self.fixed = dict(fixed or {})
        self.calls = BoundCalls()
        self._entries: dict[tuple[str, str], list[Entry]] = {}
        for entry in table.entries if table else ():
            self._entries.setdefault((entry.key.collective, entry.key.device), []).append(entry)
        self._nearest: dict[tuple, Entry | None] = {}
        self._bound: dict[tuple, CollectiveCall] = {}
        # (bound call's id, device) -> that call as it runs on the device's buffers.
        self._on_device: dict[tuple[int, str], CollectiveCall] = {}
        self._compared_mpi_cuda = False

    def _forced_variants(self, texts: Mapping[str, str]) -> dict[str, Variant]:
        try:
            return {c: parse_variant(c, t) for c, t in texts.items()}
        except UsageError as exc:
            raise UsageError(f"{self.force_source}: {exc}") from None

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike | None,
        force: Mapping[str, str] | None = None,
        model: Model | None = None,
        force_source: str = "the caller",
    ) -> Selector:
        """A selector over the table in ``path`` (None: no table, native unless forced)."""
        return cls(load_table(path) if path else None, force, model, force_source)

    def with_fixed(self, fixed: Mapping[str, Variant]) -> Selector:
        """This selector with ``fixed`` algorithms as the chain's second step."""
        chosen = copy.copy(self)
        chosen.fixed = {**self.fixed, **fixed}
        chosen._bound = {}
        return chosen

    def without_fixed(self) -> Selector:
        """This selector with no fixed algorithms (forced ones, the table and the model
        still decide)."""
        chosen = copy.copy(self)
        chosen.fixed = {}
        chosen._bound = {}
        return chosen

    @property
    def source(self) -> str:
        """Where the decisions come from, for messages."""
        text = f"table {self.table.path}" if self.table else "no table"
        name = getattr(self.model, "source", None)
        return f"{text}, model {name}" if name else text

    # --- decisions ----------------------------------------------------------------------

    def entry_for(self, query: Query) -> Entry | None:
        """The exact or nearest entry for the query's collective, device and shape."""
        key = (query.collective, query.device, query.nprocs, query.nodes, query.ranks_per_node)
        if key not in self._nearest:
            entries = self._entries.get((query.collective, query.device), [])
            if not entries and query.device in HOST_FALLBACK:
                # Registered buffers are host buffers: a table measured on private memory
                # answers for them (its choices all run there; cma only gets faster).
                entries = self._entries.get((query.collective, HOST_FALLBACK[query.device]), [])
            best = min(entries, key=lambda e: _distance(e, query), default=None)
            self._nearest[key] = best
        return self._nearest[key]

    def _from_model(self, query: Query) -> Decision | None:
        """The model hook's answer, or None (no hook, or it has no answer)."""
        modelled = self.model(query) if self.model is not None else None
        if modelled is None:
            return None
        return Decision(modelled.variant(query.collective), "model", "analytical model")

    def _from_table(self, query: Query) -> Decision:
        entry = self.entry_for(query)
        if entry is None:
            native = lookup(query.collective, "native").variant()
            why = f"{self.source} has no entry for {query.collective} on {query.device}"
            return Decision(native, "native", why)
        exact = _is_exact(entry, query)
        if not exact:
            modelled = self._from_model(query)
            if modelled is not None:
                return modelled
        starts = [r.min_bytes for r in entry.ranges]
        size_range = entry.ranges[bisect_right(starts, query.nbytes) - 1]
        how = "table" if exact else "nearest"
        why = f"{'entry' if exact else 'nearest entry'} {entry.key}, range " + _range_text(
            size_range
        )
        lo, hi = entry.measured_bytes
        if query.nbytes < lo or query.nbytes > hi:
            why += f" (outside the measured sizes {format_size(lo)}..{format_size(hi)})"
        variant = size_range.choice.variant(query.collective)
        return Decision(variant, how, why, entry, size_range)

    def decide(self, query: Query, context: CallContext | None = None) -> Decision:
        """The algorithm for one call; never an ineligible one (native instead)."""
        if query.collective not in SPECS:
            raise UsageError(
                f"unknown collective {query.collective!r}: expected one of {', '.join(SPECS)}"
            )
        context = context or default_context(query)
        if query.collective in self.forced:
            forced = self.forced[query.collective]
            decision = Decision(forced, "forced", f"forced by {self.force_source}")
        elif query.collective in self.fixed:
            return _fixed(self.fixed[query.collective], context)
        elif self.table is None:
            decision = self._from_model(query) or Decision(
                lookup(query.collective, "native").variant(), "native", "no table"
            )
        else:
            decision = self._from_table(query)
        return _eligible(decision, query.collective, context)

    def explain(self, query: Query, context: CallContext | None = None) -> str:
        """What the selector would pick for a query, and why, in a few lines."""
        decision = self.decide(query, context)
        lines = [
            f"{query.collective}, size {format_size(query.nbytes)}, {query.shape}, {query.device}:",
            f"  source: {self.source}",
            f"  how: {decision.how}: {decision.reason}",
        ]
        evidence = _evidence(decision.entry, query.nbytes)
        if evidence:
            lines.append(f"  measured: {evidence}")
        if decision.entry is not None and self.table is not None:
            # At first use: null_control reaches scipy, which every rank would import.
            from osu_dl_bench.selection.null_control import entry_lines

            lines += [f"  {line}" for line in entry_lines(self.table.header, decision.entry.key)]
        lines.append(f"  => {decision.label} ({decision.variant.algorithm.backend})")
        return "\n".join(lines)

    # --- binding ------------------------------------------------------------------------

    def bind(self, comm: Any, collective: str, context: CallContext) -> CollectiveCall:
        """The per-call function for ``collective`` on ``comm`` (collective over ``comm``:
        every rank binds the same variants in the same order)."""
        key = (comm.py2f(), collective, _context_key(context))
        if context.device == "cuda" and self.table is not None:
            self._compare_mpi_cuda(comm)
        if key not in self._bound:
            self._bound[key] = self._bind(comm, collective, context)
        return self._bound[key]

    def _compare_mpi_cuda(self, comm: Any) -> None:
        """Warn once (rank 0, one line) where the table's cuda entries were measured with
        MPI staged and MPI here reads device memory directly, or the reverse."""
        if self._compared_mpi_cuda:
            return
        self._compared_mpi_cuda = True
        note = mpi_cuda_mismatch(self.table, cuda_awareness())
        if note and comm.Get_rank() == 0:
            print(f"osu-dl-bench: warning: {note}", file=sys.stderr, flush=True)

    def _bind(self, comm: Any, collective: str, context: CallContext) -> CollectiveCall:
        query = Query(collective, comm.Get_size(), 0, context.device, context.nodes, context.ppn)
        chosen = collective in self.forced or collective in self.fixed
        if not chosen and self.table is None and self.model is not None:
            return self._bind_per_size(comm, query, context)
        entry = None if chosen or self.table is None else self.entry_for(query)
        if entry is None:
            # Forced, fixed, no table, or no entry: one decision holds for every size.
            return self.bind_variant(comm, self.decide(query, context).variant, context)
        if self.model is not None and not _is_exact(entry, query):
            return self._bind_per_size(comm, query, context)
        decisions = [
            _eligible(Decision(r.choice.variant(collective), "table", ""), collective, context)
            for r in entry.ranges
        ]
        calls = [self.bind_variant(comm, d.variant, context) for d in decisions]
        if len({id(c) for c in calls}) == 1:
            return calls[0]  # one algorithm at every size: no lookup per call
        starts = [r.min_bytes for r in entry.ranges]
        size_of = message_bytes(collective, query.nprocs)
        # Buffer size -> bound call, filled on first sight: after that a call costs one dict
        # lookup (a bisect per call was ~0.3 us, 20% of an 8-byte allreduce). The key tells
        # in place (negative) from not, since the two count the message differently.
        by_key: dict[int, CollectiveCall] = {}

        def call(send, recv, op, root):
            key = -recv.nbytes if send is None else send.nbytes
            target = by_key.get(key)
            if target is None:
                index = bisect_right(starts, size_of(send, recv)) - 1
                target = by_key[key] = calls[index]
            target(send, recv, op, root)

        return call

    def bind_variant(self, comm: Any, variant: Variant, context: CallContext) -> CollectiveCall:
        """``variant`` bound on ``comm`` as it must run on ``context.device`` buffers (staged
        through host memory where MPI is not CUDA-aware), one object per variant and
        device so that one algorithm at every size is seen as one call: the one way to
        bind a decision (bench -a tuned, select and the trainer)."""
        call = self.calls.get(comm, variant)
        key = (id(call), context.device)
        if key not in self._on_device:
            rank = comm.Get_rank()
            self._on_device[key] = for_device(call, variant.algorithm, context.device, rank)
        return self._on_device[key]

    def _bind_per_size(self, comm: Any, query: Query, context: CallContext) -> CollectiveCall:
        """Decide once per distinct size (the model hook may answer per size). Variants are
        bound on first use: safe, since every rank sees the same sizes in the same order."""
        size_of = message_bytes(query.collective, query.nprocs)
        by_size: dict[int, CollectiveCall] = {}

        def call(send, recv, op, root):
            nbytes = size_of(send, recv)
            target = by_size.get(nbytes)
            if target is None:
                variant = self.decide(replace(query, nbytes=nbytes), context).variant
                target = by_size[nbytes] = self.bind_variant(comm, variant, context)
            target(send, recv, op, root)

        return call

    def variant(self, collective: str, context: CallContext) -> Variant:
        """The selector as a variant labelled 'tuned', to be timed like any other."""
        algorithm = Algorithm(
            collective,
            TUNED,
            lambda comm: self.bind(comm, collective, context),
            backend="selector",
            summary=f"per-call choice from {self.source}",
        )
        return Variant(algorithm, MappingProxyType({}))


def mpi_cuda_mismatch(table: TuningTable, here: CudaAwareness) -> str | None:
    """Why ``table``'s choices on GPU buffers may not describe this MPI: measured staged
    where MPI here reads device memory directly, or the reverse; None where they match
    or the table does not say (written before tables recorded it)."""
    measured = measured_mpi_cuda(table.header)
    if measured is None or measured == here.path:
        return None
    how = {"direct": "reading device memory directly", "staged": "staged through host memory"}
    return (
        f"{table.path or 'the table'} was measured with MPI {how[measured]}; here MPI is "
        f"{how[here.path]} ({here.source}): its choices between MPI algorithms and NCCL on "
        "GPU buffers were timed on another path"
    )


def _context_key(context: CallContext) -> tuple:
    """What eligibility depends on, hashable (MPI ops are not)."""
    op = context.op
    return (
        context.nprocs,
        context.etype.name,
        None if op is None else (op.name, op.commutative),
        context.device,
        context.nodes,
        context.ppn,
    )


def _fixed(variant: Variant, context: CallContext) -> Decision:
    """The fixed variant's decision; a UsageError where it cannot run (asked for by name,
    so replacing it by native would measure something other than was asked)."""
    reason = variant.ineligible_reason(context)
    if reason:
        raise UsageError(
            f"--{variant.algorithm.collective} {variant.label} cannot run here "
            f"({context.etype.name}, p={context.nprocs}): it {reason}"
        )
    return Decision(variant, "fixed", "fixed by the caller")


def _eligible(decision: Decision, collective: str, context: CallContext) -> Decision:
    """The decision, or native in its place when the chosen variant cannot run here."""
    reason = decision.variant.ineligible_reason(context)
    if reason is None:
        return decision
    native = lookup(collective, "native").variant()
    why = f"{decision.label} ({decision.how}) is ineligible here: {reason}; native instead"
    return Decision(native, "native", why, decision.entry, decision.size_range)


def _range_text(size_range: SizeRange) -> str:
    hi = "inf" if size_range.max_bytes is None else format_size(size_range.max_bytes)
    return f"[{format_size(size_range.min_bytes)}, {hi}) -> {size_range.choice.label}"


def _evidence(entry: Entry | None, nbytes: int) -> str:
    """The measured point nearest to ``nbytes`` (log scale), as one line."""
    if entry is None or not entry.points:
        return ""
    point = min(entry.points, key=lambda p: abs(_log2(p["size_bytes"]) - _log2(nbytes)))
    text = f"at {format_size(point['size_bytes'])}: {point['chosen']}"
    confidence = _confidence(point)
    text += f" ({confidence})," if confidence else ""
    text += f" {point['median_us']:.2f} us"
    if point.get("native_median_us") is not None:
        text += f" vs native {point['native_median_us']:.2f} us ({point['speedup']:.2f}x)"
    return f"{text}; {point.get('reason', '')}".rstrip("; ")


def _confidence(point: Mapping[str, Any]) -> str:
    """'tie set: ring, rabenseifner; 0.71x native, 95% CI 0.66-0.78, 3 launches x 40
    rounds' from the point's fields, as far as it has them (tables before launches: '')."""
    parts = []
    if point.get("tie_set"):
        parts.append("tie set: " + ", ".join(point["tie_set"]))
    if point.get("ratio") is not None and point.get("ratio_low") is not None:
        interval = f"{point['ratio']:.2f}x native, 95% CI "
        interval += f"{point['ratio_low']:.2f}-{point['ratio_high']:.2f}"
        if point.get("launches"):
            interval += ", " + _launches_text(point["launches"], point.get("rounds") or 0)
        parts.append(interval)
    return "; ".join(parts)


def _launches_text(launches: int, rounds: int) -> str:
    """'3 launches x 40 rounds' (or '3 launches, 121 rounds' when they do not divide)."""
    head = f"{launches} launch{'es' if launches != 1 else ''}"
    if not rounds:
        return head
    if rounds % launches == 0:
        return f"{head} x {rounds // launches} rounds"
    return f"{head}, {rounds} rounds"


def _log2(n: int) -> float:
    return math.log2(max(n, 1))


def parse_bench_algorithms(
    collective: str, text: str, make_tuned: Callable[[], Variant]
) -> list[Variant]:
    """The bench's -a list where 'tuned' stands for the selector (``make_tuned()``); a
    variant named twice is measured once."""
    variants: dict[str, Variant] = {}
    for item in split_variant_texts(text):
        for variant in [make_tuned()] if item == TUNED else parse_variants(collective, item):
            variants.setdefault(variant.label, variant)
    return list(variants.values())
