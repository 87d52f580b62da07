"""Which algorithm runs each of the trainer's collective calls.

A ``CollectivePolicy`` answers ``choose(collective, nbytes, dtype) -> BoundCollective``:
a registry variant bound on the trainer's communicator:

- ``SelectorPolicy``: the runtime selector (osu_dl_bench.selection) and its one decision
  chain: OSU_DL_BENCH_FORCE_ALGORITHM, then the algorithms fixed on the command line
  (``--allreduce ring``), then the tuning table per (collective, comm size, ppn, nodes,
  bytes, buffer kind), then native;
- ``FixedPolicy``: a selector policy with some collectives fixed.

On GPU buffers without a table, the default is NCCL for the gradient allreduce and the
start-up bcast where every rank has its own GPU and NCCL is available, as PyTorch's DDP
defaults to its nccl process group on GPUs (torch/nn/parallel/distributed.py); staged
native MPI is the fallback, with the reason (``gpu_default``). A table, ``--allreduce``
or ``--bcast`` and OSU_DL_BENCH_FORCE_ALGORITHM still decide first.

``choose`` binds through the selector (``Selector.bind_variant``: staged through host
memory where MPI is not CUDA-aware, as for bench -a tuned), which may duplicate
communicators, so it is collective over the communicator: every rank must ask the same
questions in the same order, which the trainer does at set-up time, on its communication
thread. Host arrays of a run on GPU buffers (the metric sums) are decided as ``cpu``
buffers, and the algorithms fixed on the command line (meant for the run's buffers) do
not apply to them: nccl is never handed a numpy array.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from collectives import SPECS, CallContext, Variant
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.registry import UNAVAILABLE_BACKENDS, CollectiveCall, parse_variant
from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime.rank_agreement import joint_error
from osu_dl_bench.runtime.topology import Topology
from osu_dl_bench.selection.selector import Decision, Query, Selector
from osu_dl_bench.train.config import TrainConfig

# The collectives a tuning table must cover unless fixed on the command line: the
# gradient allreduce and the start-up broadcast. Others (metrics) fall back to native.
TABLE_COLLECTIVES = ("allreduce", "bcast")
GPU_DEFAULT = "nccl"
GPU_DEFAULT_HOW = "default on GPUs: one GPU per rank, NCCL available"


@dataclass(frozen=True)
class BoundCollective:
    """A chosen algorithm, bound: ``call(send, recv, op, root)`` as in the registry."""

    label: str
    how: str  # fixed | table | nearest | forced | model | native | GPU_DEFAULT_HOW
    call: CollectiveCall


class CollectivePolicy(Protocol):
    """Chooses and binds the algorithm of one call (collective over the communicator)."""

    device: str  # the kind of the run's buffers (cpu, cpu-registered, cuda)

    def choose(
        self, collective: str, nbytes: int, dtype: str = "float32", device: str | None = None
    ) -> BoundCollective:
        """The bound algorithm for a call of ``nbytes`` per rank of ``dtype`` on ``device``
        buffers (None: the run's)."""
        ...


def call_context(
    topology: Topology, collective: str, dtype: str, device: str = "cpu"
) -> CallContext:
    """What eligibility is judged on: the job's shape, the dtype, (if reducing) sum and
    the buffer kind."""
    op = reduce_op("sum") if SPECS[collective].reduces else None
    return CallContext(
        topology.nprocs, element_type(dtype), op, device, topology.nodes, topology.ppn
    )


class SelectorPolicy:
    """The runtime selector's decision chain as a policy: forced, fixed (--allreduce,
    --bcast), the table, the model, native. Each variant is bound once (the selector's
    ``BoundCalls``)."""

    def __init__(
        self,
        comm: Any,
        topology: Topology,
        selector: Selector,
        required: tuple[str, ...] = (),
        device: str = "cpu",
    ) -> None:
        self.comm, self.selector, self.topology, self.device = comm, selector, topology, device
        self.defaults: tuple[str, ...] = ()  # collectives fixed by the GPU default
        self.note = ""  # why the run's defaults are what they are (the header prints it)
        self._auxiliary = selector.without_fixed()  # for buffers of another kind
        for collective in required:
            self._require_entry(collective)

    def _require_entry(self, collective: str) -> None:
        if collective in self.selector.forced or collective in self.selector.fixed:
            return
        if self.selector.entry_for(self._query(collective, 0)) is None:
            raise UsageError(
                f"{self.selector.source} has no entry for {collective} on {self.device}: tune "
                f"{collective} too (sweep, then tune), or fix its algorithm with "
                f"--{collective} ALG"
            )

    def _query(self, collective: str, nbytes: int, device: str | None = None) -> Query:
        t = self.topology
        return Query(collective, t.nprocs, nbytes, device or self.device, t.nodes, t.ppn)

    def choose(
        self, collective: str, nbytes: int, dtype: str = "float32", device: str | None = None
    ) -> BoundCollective:
        """The selector's decision for this call on ``device`` buffers (None: the run's),
        bound as the selector binds it."""
        device = device or self.device
        selector = self.selector if device == self.device else self._auxiliary
        context = call_context(self.topology, collective, dtype, device)
        decision = selector.decide(self._query(collective, nbytes, device), context)
        call = selector.bind_variant(self.comm, decision.variant, context)
        how = decision.how
        if how == "fixed" and selector is self.selector and collective in self.defaults:
            how = GPU_DEFAULT_HOW
        return BoundCollective(decision.label, how, call)

    def decision(self, collective: str, nbytes: int, dtype: str = "float32") -> Decision:
        """The selector's decision for a call of the run's buffers (nothing bound)."""
        context = call_context(self.topology, collective, dtype, self.device)
        return self.selector.decide(self._query(collective, nbytes), context)

    def bind(
        self, collective: str, variant: Variant, dtype: str = "float32"
    ) -> BoundCollective | None:
        """``variant`` bound for a call of the run's buffers, as a decision is bound (None
        where it cannot run here); collective over the communicator, as ``choose``."""
        context = call_context(self.topology, collective, dtype, self.device)
        if variant.ineligible_reason(context):
            return None
        call = self.selector.bind_variant(self.comm, variant, context)
        return BoundCollective(variant.label, "check", call)


class FixedPolicy(SelectorPolicy):
    """Fixed algorithms for some collectives (the chain's fixed step); the fallback
    policy's selector (native without one) decides the others."""

    def __init__(
        self,
        comm: Any,
        topology: Topology,
        variants: Mapping[str, Variant],
        fallback: SelectorPolicy | None = None,
        device: str = "cpu",
    ) -> None:
        base = fallback.selector if fallback is not None else Selector(force={})
        super().__init__(comm, topology, base.with_fixed(variants), device=device)


def fixed_variants(cfg: TrainConfig) -> dict[str, Variant]:
    """The algorithms fixed on the command line (--allreduce, --bcast)."""
    texts = {"allreduce": cfg.allreduce, "bcast": cfg.bcast}
    return {c: parse_variant(c, text) for c, text in texts.items() if text}


@dataclass(frozen=True)
class GpuDefault:
    """What the trainer runs on GPU buffers where nothing else decides: ``collectives``
    fixed to nccl, or none of them and ``note`` says why staged native MPI runs."""

    collectives: tuple[str, ...]
    note: str


def _nccl_unavailable() -> str | None:
    """Why the nccl algorithms are not registered in this process (None: they are)."""
    try:
        parse_variant("allreduce", GPU_DEFAULT)
    except UsageError:
        return UNAVAILABLE_BACKENDS.get(GPU_DEFAULT, "the nccl backend is not registered")
    return None


def _nccl_ineligible(topology: Topology, collectives: tuple[str, ...]) -> str | None:
    """Why nccl cannot carry float32 gradients or the state bcast on this rank's GPU (ranks
    sharing a GPU, ...), as the registry's requirements judge it; None where it can."""
    for collective in collectives:
        context = call_context(topology, collective, "float32", "cuda")
        reason = parse_variant(collective, GPU_DEFAULT).ineligible_reason(context)
        if reason:
            return f"nccl {reason}"
    return None


def agreed_reason(comm: Any, reason: str | None) -> str | None:
    """One verdict for every rank: the first rank's reason (named) where any has one."""
    return joint_error(comm.allgather(reason))


def gpu_default(cfg: TrainConfig, comm: Any, topology: Topology) -> GpuDefault:
    """The trainer's default for the collectives nothing else decides on ``cfg.buffers``:
    nccl on GPUs where every rank has its own GPU and NCCL is available, else staged native
    MPI with the reason. The same on every rank (collective over ``comm``: each check is
    agreed, so a rank that would decide otherwise falls back with the others, never
    hangs); choosing the GPU (``select_local_gpu``) happens here when NCCL is available."""
    if cfg.buffers != "cuda" or cfg.table:
        return GpuDefault((), "")
    try:
        fixed = fixed_variants(cfg)
    except UsageError:  # build_policy reports it, agreed by every rank
        return GpuDefault((), "")
    open_ = tuple(c for c in TABLE_COLLECTIVES if c not in fixed)
    if not open_:
        return GpuDefault((), "")
    reason = agreed_reason(comm, _nccl_unavailable())
    if reason is None:
        from collectives.device import select_local_gpu

        select_local_gpu(comm)  # ranks sharing a GPU are found here, by device UUID
        reason = agreed_reason(comm, _nccl_ineligible(topology, open_))
    if reason is not None:
        return GpuDefault((), f"{', '.join(open_)}: staged native MPI, not nccl: {reason}")
    return GpuDefault(open_, "")


def build_policy(
    cfg: TrainConfig, comm: Any, topology: Topology, default: GpuDefault | None = None
) -> SelectorPolicy:
    """Fixed algorithms first, then the selector over ``cfg.table``, else ``default`` (nccl
    on GPUs where eligible), else native. Collective over ``comm`` (binding)."""
    fixed = fixed_variants(cfg)
    default = default or GpuDefault((), "")
    defaults = {c: parse_variant(c, GPU_DEFAULT) for c in default.collectives}
    selector = Selector.from_file(cfg.table)
    required = tuple(c for c in TABLE_COLLECTIVES if c not in fixed) if cfg.table else ()
    policy = SelectorPolicy(
        comm, topology, selector.with_fixed({**defaults, **fixed}), required, cfg.buffers
    )
    policy.defaults, policy.note = default.collectives, default.note
    return policy
