"""Every rank chooses its GPU, then binds allreduce through the selector with nccl forced
and runs it on device buffers (the strict cupy stand-in on PYTHONPATH): run under
mpiexec, where ranks may see different GPUs (per-rank CUDA_VISIBLE_DEVICES, MPICH's
cliques as nodes). Each rank prints ``RESULT {json}``: what it ran, why, and the sum."""

import json

import numpy as np

from collectives import CallContext, device
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from osu_dl_bench.runtime.start import init_mpi
from osu_dl_bench.selection.selector import Query, Selector


def main() -> None:
    comm = init_mpi("single").COMM_WORLD
    device.select_local_gpu(comm)
    import cupy

    ctx = CallContext(comm.Get_size(), element_type("float32"), reduce_op("sum"), "cuda")
    selector = Selector(force={"allreduce": "nccl"})
    decision = selector.decide(Query("allreduce", comm.Get_size(), 16, "cuda"), ctx)
    call = selector.bind(comm, "allreduce", ctx)
    buffer = cupy.zeros(4, np.float32)
    buffer.set(np.full(4, comm.Get_rank() + 1, np.float32))
    device.device_ready(buffer)
    call(None, buffer, reduce_op("sum"), 0)
    result = {
        "rank": comm.Get_rank(),
        "ran": decision.label,
        "reason": device.gpu_sharing_reason(),
        "sum": buffer.get().tolist(),
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
