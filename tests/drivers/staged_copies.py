"""How many host copies a staged rooted collective pays on each rank, through both ways a
call is bound for device buffers (the kernel's ``device_calls``: bench and sweep; the
selector's ``bind_variant``: -a tuned, select and the trainer), at every root given, and
whether its result is still right. Run under mpiexec with the strict cupy stand-in on
PYTHONPATH and OSU_DL_BENCH_CUDA_AWARE=0: ``python staged_copies.py ROOT[,ROOT...]``.
Ends with ``SUMMARY {json}`` on rank 0: per collective, path and root, each rank's
device-to-host (get) and host-to-device (set) copies of one call, and the wrong elements
its check found."""

import json
import sys

import cupy
import numpy as np

from collectives import SPECS, CallContext, lookup
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.registry import BoundCalls
from osu_dl_bench.measurement.kernel import device_calls, prepare_inputs, validate
from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.start import init_mpi
from osu_dl_bench.selection import Selector

COUNTS = {"get": 0, "set": 0}


def _counted(name):
    real = getattr(cupy.ndarray, name)

    def counted(self, *args, **kwargs):
        COUNTS[name] += 1
        return real(self, *args, **kwargs)

    setattr(cupy.ndarray, name, counted)


def _bound(comm, path, variant, ctx):
    if path == "kernel":
        return device_calls(comm, BoundCalls(), [variant], "cuda")[0]
    return Selector(None, force={}).bind_variant(comm, variant, ctx)


def body() -> int:
    comm = init_mpi("single").COMM_WORLD
    etype = element_type("float32")
    for name in ("get", "set"):
        _counted(name)
    results = []
    for collective in ("bcast", "reduce"):
        spec = SPECS[collective]
        op = reduce_op("sum") if spec.reduces else None
        ctx = CallContext(comm.Get_size(), etype, op, "cuda", 1, comm.Get_size())
        variant = lookup(collective, "native").variant()
        for path in ("kernel", "selector"):
            call = _bound(comm, path, variant, ctx)
            for root in (int(r) for r in sys.argv[1].split(",")):
                inputs = prepare_inputs(comm, spec, etype, op, cupy, 1000, root)
                COUNTS.update(get=0, set=0)
                call(inputs.bufs.send, inputs.bufs.recv, op, root)
                copies = comm.gather(dict(COUNTS), root=0)
                wrong = validate(comm, [call], inputs)[0]
                results.append(
                    {"collective": collective, "path": path, "root": root, "copies": copies}
                    | {"wrong": wrong}
                )
    if comm.Get_rank() == 0:
        print("SUMMARY " + json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    np.seterr(all="raise")
    sys.exit(run_guarded(body))
