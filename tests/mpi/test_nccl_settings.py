"""NCCL's algorithm and protocol as variants of ``nccl``, on the strict cupy stand-in: each
forced variant's communicator is created while NCCL_ALGO and NCCL_PROTO say what it forces,
NCCL's own choice under the environment as the user left it, and the environment is back as
it was after every bind. At p = 1 (the one case a one-GPU node runs) and p = 2 (two stand-in
GPUs), where the results are checked too."""

from __future__ import annotations

import json

import pytest
from mpirun import run_mpi
from support.strict import STRICT_CUPY

SPMD = """
import json, os
import cupy
import numpy as np
from mpi4py import MPI
from cupy.cuda import nccl
from collectives.device import select_local_gpu
from collectives.ops import reduce_op
from collectives.registry import parse_variant

comm = MPI.COMM_WORLD
select_local_gpu(comm)
os.environ["NCCL_PROTO"] = "Simple"  # the user's own setting
os.environ.pop("NCCL_ALGO", None)
user = {name: os.environ.get(name) for name in ("NCCL_ALGO", "NCCL_PROTO")}
seen, wrong = {}, []
cases = [("allreduce", t) for t in ("nccl", "nccl:algo=ring,proto=ll",
                                    "nccl:algo=tree,proto=ll128", "nccl:algo=tree")]
cases += [("bcast", t) for t in ("nccl", "nccl:proto=ll128")]
for collective, text in cases:
    variant = parse_variant(collective, text)
    made = len(nccl.CREATED)
    call = variant.bind(comm)
    seen[f"{collective} {variant.label}"] = nccl.CREATED[made:]
    after = {name: os.environ.get(name) for name in ("NCCL_ALGO", "NCCL_PROTO")}
    if after != user:
        wrong.append(f"{text}: environment left as {after}")
    data = cupy.asarray(np.full(13, comm.Get_rank() + 1, dtype=np.float32))
    call(None, data, reduce_op("sum") if collective == "allreduce" else None, 0)
    p = comm.Get_size()
    expected = p * (p + 1) / 2 if collective == "allreduce" else 1
    if not (cupy.asnumpy(data) == expected).all():
        wrong.append(f"{text}: {cupy.asnumpy(data)[:3]} != {expected}")
    # A second bind on the same communicator reuses the communicator of those settings.
    variant.bind(comm)
    if len(nccl.CREATED) != made + len(seen[f"{collective} {variant.label}"]):
        wrong.append(f"{text}: a second bind made another NCCL communicator")
if comm.Get_rank() == 0:
    print("RESULT " + json.dumps({"seen": seen, "wrong": wrong}))
"""


@pytest.mark.parametrize("nprocs", [1, 2])
def test_each_nccl_variant_gets_a_communicator_made_under_its_settings(nprocs):
    env = {"PYTHONPATH": str(STRICT_CUPY), "STRICT_CUPY_DEVICES": str(nprocs)}
    res = run_mpi(nprocs, ["-c", SPMD], timeout=120, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result["wrong"] == []
    simple = {"NCCL_ALGO": None, "NCCL_PROTO": "Simple"}  # NCCL's choice, as the user set it
    assert result["seen"] == {
        "allreduce nccl": [simple],
        "allreduce nccl:algo=ring,proto=ll": [{"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}],
        "allreduce nccl:algo=tree,proto=ll128": [{"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"}],
        "allreduce nccl:algo=tree": [{"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}],
        # the plain bcast shares the communicator of the plain allreduce (made above)
        "bcast nccl": [],
        "bcast nccl:proto=ll128": [{"NCCL_ALGO": None, "NCCL_PROTO": "LL128"}],
    }


CATALOG = """
from collectives.errors import UsageError
from collectives.registry import lookup, parse_variant

for collective in ("allreduce", "bcast"):
    print(collective, " ".join(v.label for v in lookup(collective, "nccl").grid_variants()))
for collective, text in [("allreduce", "nccl:algo=nvls"), ("allreduce", "nccl:proto=LL"),
                         ("bcast", "nccl:algo=ring")]:
    try:
        parse_variant(collective, text)
        print("ACCEPTED", text)
    except UsageError as exc:
        print("REFUSED", exc)
"""


def test_the_sweep_tries_nccls_own_choice_and_every_forced_pair_and_refuses_others():
    env = {"PYTHONPATH": str(STRICT_CUPY), "STRICT_CUPY_DEVICES": "1"}
    res = run_mpi(1, ["-c", CATALOG], timeout=120, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.splitlines()
    protocols = ("simple", "ll", "ll128")
    pairs = [f"nccl:algo={a},proto={p}" for a in ("ring", "tree") for p in protocols]
    assert lines[0].split() == ["allreduce", "nccl", *pairs]
    bcasts = ["nccl:proto=simple", "nccl:proto=ll", "nccl:proto=ll128"]
    assert lines[1].split() == ["bcast", "nccl", *bcasts]
    assert "REFUSED nccl:algo=nvls: expected auto (NCCL's choice) or one of ring, tree" in lines
    assert any(line.startswith("REFUSED nccl:proto=LL: expected auto") for line in lines)
    # NCCL's broadcast has only the ring algorithm: no algo parameter there.
    assert any(line.startswith("REFUSED") and "has no parameter algo" in line for line in lines)
