"""Multi-rank correctness driver: every registered algorithm against the expected result.

Run under mpiexec by tests/mpi/test_algorithms_multirank.py and others. It loops over
collectives, algorithms, dtypes, ops, sizes, roots and in-place, reports each failing case
and ends with one ``SUMMARY {json}`` line from rank 0. Expected results come from the
inputs (collectives.specs), never from an MPI call, so native is checked too.

Each algorithm's default variant is checked at ``--sizes``. With ``--grid-sizes``, every
variant of its sweep grid (Algorithm.grid_variants, what ``sweep`` tries) is checked too,
at those sizes, and where a grid value of a segment or chunk parameter (the algorithm's
Split) leaves fewer than PIPELINE_PIECES pieces there, so does a stand-in with that value
scaled down until it cuts at least that many: the sweep's values are for messages of
megabytes, the test's are kilobytes, and a pipeline of one segment proves nothing about
the segment offsets.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import dataclass

import numpy as np

from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.start import init_mpi

MPI = init_mpi("single")


from collectives import SPECS, CallContext, CallShape, algorithms, distinct_variants  # noqa: E402
from collectives.buffers import array_module  # noqa: E402
from collectives.dtypes import element_type  # noqa: E402
from collectives.ops import reduce_op  # noqa: E402
from collectives.registry import Algorithm, BoundCalls, Variant  # noqa: E402
from osu_dl_bench.measurement.kernel import count_wrong  # noqa: E402
from osu_dl_bench.runtime.topology import discover_topology  # noqa: E402

# The fewest pieces a stand-in cuts its unit into: a first, a middle and a last one, the
# last ragged where the unit is not a multiple of the piece (odd element counts).
PIPELINE_PIECES = 3


@dataclass(frozen=True)
class Cases:
    """The dtypes, ops and sizes one variant is checked at (every root, in place or not)."""

    dtypes: tuple[str, ...]
    ops: tuple[str, ...]
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class Check:
    """One variant to check at ``cases``; ``stands_for``: the grid variants' labels it
    covers (its own, or those it is the scaled-down stand-in or twin of)."""

    variant: Variant
    cases: Cases
    stands_for: tuple[str, ...] = ()


def _cases(cases: Cases, spec, nprocs):
    ops = [reduce_op(o) for o in cases.ops] if spec.reduces else [None]
    roots = range(nprocs) if spec.rooted else [0]
    sizes = [0] if spec.name == "barrier" else cases.sizes
    return itertools.product(cases.dtypes, ops, sizes, roots, (False, True))


def _forbid_kernel_copies(forbid: bool) -> None:
    """With ``forbid``, a cma kernel copy raises: on registered buffers every peer block
    must be reached through its mapping (the bind-time probe runs before this)."""
    from collectives import cma

    def refuse(*args):
        raise RuntimeError("cma copied through the kernel although every buffer is registered")

    original = cma.Kernel.__dict__.get("_original_transfer", cma.Kernel._transfer)
    cma.Kernel._original_transfer = original
    cma.Kernel._transfer = staticmethod(refuse) if forbid else staticmethod(original)


def pieces(variant: Variant, p: int, n: int, itemsize: int) -> tuple[int, bool]:
    """(pieces the split parameter cuts its unit into, whether the last is shorter)."""
    count = variant.pieces_per_unit(p, n, itemsize)
    if count == 1:
        return 1, False
    split = variant.algorithm.split
    step = max(1, int(variant.params[split.param]) // itemsize)
    return count, split.unit(p, n) % step != 0


def stand_in(variant: Variant, p: int, n: int, itemsize: int) -> Variant | None:
    """``variant`` with its split parameter cut to a third, again and again, until it cuts
    n elements of ``itemsize`` bytes into PIPELINE_PIECES pieces or more (not below the
    parameter's least value); None where the variant already does or its value means
    "whole". Thirds of the grid's powers of two give pieces of odd element counts."""
    split = variant.algorithm.split
    if split is None or variant.pieces_per_unit(p, n, itemsize) >= PIPELINE_PIECES:
        return None
    value = int(variant.params[split.param])
    if value <= 0:
        return None  # zero_means_whole: not pipelined at any size
    scaled = variant
    while value > split.least and scaled.pieces_per_unit(p, n, itemsize) < PIPELINE_PIECES:
        value = max(split.least, value // 3)
        scaled = variant.algorithm.variant(**{**variant.params, split.param: value})
    return scaled


def _grid_checks(algo: Algorithm, cases: Cases, p: int) -> list[Check]:
    """Every grid variant at each size of ``cases`` less its twins there (as the sweep
    times them, collectives.distinct_variants), and its scaled-down stand-in where it
    cuts fewer than PIPELINE_PIECES pieces (the fewest: at the smallest dtype)."""
    itemsizes = [element_type(d).itemsize for d in cases.dtypes]
    found: dict[tuple[str, int], tuple[Variant, list[str]]] = {}
    for n in cases.sizes:
        variants = algo.grid_variants()
        # Twins at the largest itemsize (the most pieces) are twins at every dtype here.
        kept = {v.label for v in distinct_variants(variants, p, n, max(itemsizes))}
        for variant in variants:
            targets = [variant] if variant.label in kept else []
            targets += filter(None, [stand_in(variant, p, n, min(itemsizes))])
            for target in targets:
                found.setdefault((target.label, n), (target, []))[1].append(variant.label)
    return [
        Check(variant, Cases(cases.dtypes, cases.ops, (n,)), tuple(labels))
        for (_, n), (variant, labels) in found.items()
    ]


def _run_case(comm, call, spec, etype, op, n, root, in_place, xp) -> int:
    shape = CallShape(n, comm.Get_size(), comm.Get_rank(), root, in_place)
    bufs = spec.allocate(xp, etype.dtype, shape)
    spec.fill(bufs, shape, op)
    call(bufs.send, bufs.recv, op, root)
    output = spec.output(bufs, shape)
    if output is None:
        return 0
    return count_wrong(output, spec.expected(shape, etype.dtype, op), etype)


def _key(variant: Variant) -> tuple[str, str]:
    return variant.algorithm.collective, variant.label


class Tally:
    """Passed, failed and skipped cases, the failures, and the grid variants checked."""

    def __init__(self) -> None:
        self.passed = self.failed = self.skipped = 0
        self.failures: list[str] = []
        # 'allreduce/ring:seg=1M' -> [most pieces, whether a ragged last one], over the
        # cases run of the grid variant, its twins and its stand-ins.
        self.grid: dict[str, list] = {}
        self._ran: set[tuple[str, str]] = set()

    def covers(self, check: Check) -> bool:
        """Whether ``check``'s variant ran at least one case."""
        return _key(check.variant) in self._ran

    def ran(self, check: Check, n: int, itemsize: int, p: int) -> None:
        """Note that ``check`` ran at n elements of ``itemsize`` bytes."""
        self._ran.add(_key(check.variant))
        count, ragged = pieces(check.variant, p, n, itemsize)
        collective = check.variant.algorithm.collective
        for label in (f"{collective}/{grid_label}" for grid_label in check.stands_for):
            most, any_ragged = self.grid.get(label, (1, False))
            self.grid[label] = [max(most, count), any_ragged or ragged]

    def summary(self, nprocs: int) -> dict:
        """The SUMMARY line's fields."""
        return {
            "nprocs": nprocs,
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "failures": self.failures[:50],
            "grid": self.grid,
        }


def _run_check(comm, call, check: Check, ctx_of, xp, tally: Tally) -> None:
    variant, spec = check.variant, SPECS[check.variant.algorithm.collective]
    ran: list[str] = []
    wrong: list[int] = []
    for dtype, op, n, root, in_place in _cases(check.cases, spec, comm.Get_size()):
        etype = element_type(dtype)
        if op is not None and op.integer_only and not etype.is_integer:
            continue
        if variant.ineligible_reason(ctx_of(etype, op)):
            tally.skipped += 1
            continue
        wrong.append(_run_case(comm, call, spec, etype, op, n, root, in_place, xp))
        tally.ran(check, n, etype.itemsize, comm.Get_size())
        ran.append(f"dtype={dtype} op={op and op.name} n={n} root={root} in_place={in_place}")
    # One sum over the ranks for the whole check, not one per case: on oversubscribed
    # cores every extra collective is a round of the scheduler for each rank.
    totals = np.asarray(wrong, dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, totals, op=MPI.SUM)
    for case, count in zip(ran, totals.tolist(), strict=True):
        if count:
            tally.failed += 1
            tally.failures.append(f"{spec.name}/{variant.label} {case}: {count} wrong")
        else:
            tally.passed += 1


def _checks(algo: Algorithm, args, p: int) -> list[Check]:
    checks = [Check(algo.variant(), args.cases)]
    if args.grid_cases.sizes and algo.grid:
        checks += _grid_checks(algo, args.grid_cases, p)
    return checks


def _selected(args) -> list[Algorithm]:
    chosen = [a for name in args.collectives for a in algorithms(name)]
    if args.algorithms:
        chosen = [a for a in chosen if a.name in args.algorithms]
    return [a for a in chosen if not args.backends or a.backend in args.backends]


def _run_checks(comm, checks: list[Check], args, tally: Tally, ranks_per_node) -> None:
    """Run ``checks`` on the nodes discover_topology finds, or emulated nodes of
    ``ranks_per_node`` ranks; each variant bound once, on those nodes."""
    topo = discover_topology(comm, ranks_per_node)
    # --private-ranks: these ranks allocate private memory whatever --device says, so
    # algorithms meet a mix of registered and private buffers.
    private = comm.Get_rank() in args.private_ranks
    xp = array_module("cpu" if private else args.device)
    p = comm.Get_size()

    def ctx_of(etype, op):
        return CallContext(p, etype, op, args.device, topo.nodes, topo.ppn)

    bound = BoundCalls()
    for item in checks:
        _forbid_kernel_copies(False)
        call = bound.get(comm, item.variant)
        _forbid_kernel_copies(args.forbid_kernel_copies)
        _run_check(comm, call, item, ctx_of, xp, tally)


def check(args) -> dict:
    """Run every case; returns the summary (the same on every rank)."""
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    tally = Tally()
    checks = [item for algo in _selected(args) for item in _checks(algo, args, p)]
    try:
        _run_checks(comm, checks, args, tally, args.ranks_per_node)
        if args.grid_ranks_per_node and args.grid_cases.sizes:
            # The node-aware variants (hierarchical:inner=...) need several nodes: emulated
            # ones, for the grid variants that never ran on the nodes there are (bound anew:
            # a variant finds its nodes when bound).
            never_ran = [item for item in checks if item.stands_for and not tally.covers(item)]
            _run_checks(comm, never_ran, args, tally, args.grid_ranks_per_node)
    finally:
        # The SPMD tests call check() again in this process: cma copies as before.
        _forbid_kernel_copies(False)
    return tally.summary(p)


def check_with(argv: list[str]) -> dict:
    """``check`` with the options given as on the command line (the SPMD tests' call)."""
    return check(parse(argv))


def _list(text: str) -> tuple[str, ...]:
    return tuple(item for item in text.split(",") if item)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The driver's options (``argv``; None: the command line)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--collectives", default=",".join(SPECS))
    parser.add_argument("--algorithms", default="")
    parser.add_argument("--backends", default="", help="only algorithms of these backends")
    parser.add_argument("--dtypes", default="float32,float64,float16,int32,int64")
    parser.add_argument("--ops", default="sum,max,min,prod")
    # 0, 1, primes and sizes no p here divides; large messages have their own test.
    parser.add_argument("--sizes", default="0,1,3,13,1000,4099")
    parser.add_argument(
        "--grid-sizes", default="", help="also check every grid variant at these sizes"
    )
    parser.add_argument("--grid-dtypes", default="float32,float64")
    parser.add_argument("--grid-ops", default="sum,max")
    parser.add_argument("--ranks-per-node", type=int, default=None)
    parser.add_argument(
        "--grid-ranks-per-node",
        type=int,
        default=None,
        help="then emulate nodes of this many ranks for the grid variants never run",
    )
    parser.add_argument("--device", default="cpu", help="buffer kind (cpu, cpu-registered)")
    parser.add_argument("--private-ranks", default="", help="ranks allocating private memory")
    parser.add_argument("--forbid-kernel-copies", action="store_true")
    args = parser.parse_args(argv)
    args.collectives = _list(args.collectives)
    args.algorithms = _list(args.algorithms)
    args.backends = _list(args.backends)
    args.cases = Cases(_list(args.dtypes), _list(args.ops), tuple(map(int, _list(args.sizes))))
    sizes = tuple(map(int, _list(args.grid_sizes)))
    args.grid_cases = Cases(_list(args.grid_dtypes), _list(args.grid_ops), sizes)
    args.private_ranks = {int(r) for r in _list(args.private_ranks)}
    return args


def main() -> int:
    summary = check(parse())
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("SUMMARY " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_guarded(main))
