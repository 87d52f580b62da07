"""Multi-rank correctness driver: every registered algorithm against the expected result.

Run under mpiexec by tests/test_algorithms_multirank.py. It loops over collectives,
algorithms, dtypes, ops, sizes, roots and in-place, reports each failing case and ends
with one ``SUMMARY {json}`` line from rank 0. Expected results come from the inputs
(collectives.specs), never from an MPI call, so native is checked too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

from osu_dl_bench.runtime import init_mpi, run_guarded

MPI = init_mpi("single")


from collectives import SPECS, CallContext, CallShape, algorithms  # noqa: E402
from collectives.buffers import array_module  # noqa: E402
from collectives.dtypes import element_type  # noqa: E402
from collectives.ops import reduce_op  # noqa: E402
from osu_dl_bench.measurement.kernel import count_wrong  # noqa: E402
from osu_dl_bench.runtime import discover_topology  # noqa: E402


def _cases(args, spec, nprocs):
    ops = [reduce_op(o) for o in args.ops] if spec.reduces else [None]
    roots = range(nprocs) if spec.rooted else [0]
    sizes = [0] if spec.name == "barrier" else args.sizes
    return itertools.product(args.dtypes, ops, sizes, roots, (False, True))


def _forbid_kernel_copies(forbid: bool) -> None:
    """With ``forbid``, a cma kernel copy raises: on registered buffers every peer block
    must be reached through its mapping (the bind-time probe runs before this)."""
    from collectives import cma

    def refuse(*args):
        raise RuntimeError("cma copied through the kernel although every buffer is registered")

    original = cma.Kernel.__dict__.get("_original_transfer", cma.Kernel._transfer)
    cma.Kernel._original_transfer = original
    cma.Kernel._transfer = staticmethod(refuse) if forbid else staticmethod(original)


def _run_case(comm, call, spec, etype, op, n, root, in_place, xp) -> int:
    shape = CallShape(n, comm.Get_size(), comm.Get_rank(), root, in_place)
    bufs = spec.allocate(xp, etype.dtype, shape)
    spec.fill(bufs, shape, op)
    call(bufs.send, bufs.recv, op, root)
    output = spec.output(bufs, shape)
    if output is None:
        return 0
    return count_wrong(output, spec.expected(shape, etype.dtype, op), etype)


def check(args) -> dict:
    """Run every case; returns the summary (the same on every rank)."""
    comm = MPI.COMM_WORLD
    topo = discover_topology(comm, args.ranks_per_node)
    # --private-ranks: these ranks allocate private memory whatever --device says, so
    # algorithms meet a mix of registered and private buffers.
    private = comm.Get_rank() in args.private_ranks
    xp = array_module("cpu" if private else args.device)
    passed = failed = skipped = 0
    failures: list[str] = []
    for name in args.collectives:
        spec = SPECS[name]
        for algo in algorithms(name):
            if args.algorithms and algo.name not in args.algorithms:
                continue
            if args.backends and algo.backend not in args.backends:
                continue
            variant = algo.variant()
            _forbid_kernel_copies(False)
            call = variant.bind(comm)
            _forbid_kernel_copies(args.forbid_kernel_copies)
            for dtype, op, n, root, in_place in _cases(args, spec, comm.Get_size()):
                etype = element_type(dtype)
                if op is not None and op.integer_only and not etype.is_integer:
                    continue
                ctx = CallContext(comm.Get_size(), etype, op, args.device, topo.nodes, topo.ppn)
                if variant.ineligible_reason(ctx):
                    skipped += 1
                    continue
                wrong = _run_case(comm, call, spec, etype, op, n, root, in_place, xp)
                wrong = comm.allreduce(wrong)
                if wrong:
                    failed += 1
                    failures.append(
                        f"{name}/{variant.label} dtype={dtype} op={op and op.name} "
                        f"n={n} root={root} in_place={in_place}: {wrong} wrong"
                    )
                else:
                    passed += 1
    return {
        "nprocs": comm.Get_size(),
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
        "failures": failures[:50],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--collectives", default=",".join(SPECS))
    parser.add_argument("--algorithms", default="")
    parser.add_argument("--backends", default="", help="only algorithms of these backends")
    parser.add_argument("--dtypes", default="float32,float64,float16,int32,int64")
    parser.add_argument("--ops", default="sum,max,min,prod")
    # 0, 1, primes and sizes no p here divides; large messages have their own test.
    parser.add_argument("--sizes", default="0,1,3,13,1000,4099")
    parser.add_argument("--ranks-per-node", type=int, default=None)
    parser.add_argument("--device", default="cpu", help="buffer kind (cpu, cpu-registered)")
    parser.add_argument("--private-ranks", default="", help="ranks allocating private memory")
    parser.add_argument("--forbid-kernel-copies", action="store_true")
    args = parser.parse_args()
    args.collectives = args.collectives.split(",")
    args.algorithms = [a for a in args.algorithms.split(",") if a]
    args.backends = [b for b in args.backends.split(",") if b]
    args.dtypes = args.dtypes.split(",")
    args.ops = args.ops.split(",")
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.private_ranks = {int(r) for r in args.private_ranks.split(",") if r}
    summary = check(args)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("SUMMARY " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_guarded(main))
