"""A run directory whose MPICH candidates won in each of the three layers, for the
three-file export's tests (unit and MPI)."""

from __future__ import annotations

from pathlib import Path

from support.tuning import launch_rows, machine_states, scaled, write_run

# allreduce at p = 2: ch4's beta wins below 4 KiB, MPIR's ring from 4 KiB to 64 KiB, the
# POSIX layer's fallback to MPIR from 64 KiB (factors: candidate time / the default's).
LAYERED_PLAN = {
    1024: {"native:alg=ch4_beta": 0.5, "native:alg=mpir_ring": 1.3, "native:alg=posix_mpir": 1.3},
    2048: {"native:alg=ch4_beta": 0.5, "native:alg=mpir_ring": 1.3, "native:alg=posix_mpir": 1.3},
    8192: {"native:alg=ch4_beta": 1.3, "native:alg=mpir_ring": 0.5, "native:alg=posix_mpir": 1.3},
    16384: {"native:alg=ch4_beta": 1.3, "native:alg=mpir_ring": 0.5, "native:alg=posix_mpir": 1.3},
    65536: {"native:alg=ch4_beta": 1.3, "native:alg=mpir_ring": 1.3, "native:alg=posix_mpir": 0.4},
    1 << 20: {
        "native:alg=ch4_beta": 1.3,
        "native:alg=mpir_ring": 1.3,
        "native:alg=posix_mpir": 0.3,
    },
}


def layered_run(path: Path, plan=LAYERED_PLAN, nprocs: int = 2, metadata=None) -> Path:
    """A 3-launch run: native in the MPI group, each library candidate (``native:alg=``) in
    its own forced group (alg_NAME), any other candidate beside native, at each size of
    ``plan`` ({size: {label: factor}})."""
    rows = []
    for offset, (size, candidates) in enumerate(sorted(plan.items())):
        states = machine_states(launches=3, rounds=20, seed=offset)
        rows += launch_rows("allreduce", "native", size, states, nprocs=nprocs)
        for number, (name, factor) in enumerate(candidates.items(), start=1):
            times = scaled(states, factor, seed=100 * offset + number)
            group = "alg_" + name.partition("=")[2] if name.startswith("native:") else None
            rows += launch_rows("allreduce", name, size, times, group=group, nprocs=nprocs)
    return write_run(path, rows, metadata)


# Allreduce and bcast past MPICH's first calls, at sizes on both sides of the export's
# bounds, every result checked.
MPICH_PROBE = """
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
nodes = comm.allreduce(int(comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank() == 0))
bad = 0
for size in (8, 1024, 8192, 65536, 1 << 20):
    n = size // 8
    for _ in range(8):
        out = np.empty(n)
        comm.Allreduce(np.full(n, comm.rank + 1.0), out)
        bad += int(not np.all(out == comm.size * (comm.size + 1) / 2))
        data = np.full(n, 7.0) if comm.rank == 0 else np.zeros(n)
        comm.Bcast(data, 0)
        bad += int(not np.all(data == 7.0))
bad = comm.allreduce(bad)
if comm.rank == 0:
    print(f"PROBE p={comm.size} nodes={nodes} wrong={bad}", flush=True)
"""


def synthetic_latencies(factors, launches=12, seed=5, collective="allreduce", noise=0.02):
    """Synthetic C client latencies at p = 2: ``factors`` maps arm -> size -> its time over
    the default's (1 where not given, and for the file, default and null arms at 8, 64 and
    1024 bytes always); the machine's state moves every arm of a launch alike, and each arm
    but the default's has lognormal ``noise`` (sd of log) of its own."""
    import numpy as np

    from osu_dl_bench.selection.exports.verification import ARMS, DEFAULT_ARM

    rng = np.random.default_rng(seed)
    sizes = sorted({s for by_size in factors.values() for s in by_size} | {8, 64, 1024})
    found = {}
    for size in sizes:
        for launch in range(1, launches + 1):
            base = 10.0 * rng.lognormal(0, 0.3)
            for arm in (*ARMS, *[a for a in factors if a not in ARMS]):
                factor = factors.get(arm, {}).get(size, 1.0)
                own = 1.0 if arm == DEFAULT_ARM else rng.lognormal(0, noise)
                found.setdefault((collective, 2, size, arm), {})[launch] = base * factor * own
    return found


def corrected_export(tmp_path):
    """A three-file export (support.mpich_layers: ch4 beta below 8K, POSIX -> MPIR from
    64K), judged by a synthetic C client: beta's gain holds, the POSIX departure gains
    nothing at 64K-512K, and the candidate posix_mpir, run as an arm of its own, halves
    1M's time; then written again with the corrections."""
    from osu_dl_bench.selection.exports import mpich
    from osu_dl_bench.selection.exports.readers import file_reader
    from osu_dl_bench.selection.exports.verification import (
        FILE_ARM,
        best_choices,
        client_verdicts,
        corrected_table,
        corrections,
    )
    from osu_dl_bench.selection.tune import build_table

    table, _ = build_table(layered_run(tmp_path / "run"), "lib")
    mpich.export(table, tmp_path / "lib")
    sizes = [1024 << k for k in range(11)]  # 1K .. 1M
    factors = {
        FILE_ARM: {s: 0.5 if s < 8192 else 1.0 for s in sizes},
        "ch4_beta": {s: 0.5 for s in sizes},
        "posix_mpir": {s: 0.4 if s == 1 << 20 else 1.0 for s in sizes},
    }
    latencies = synthetic_latencies(factors)
    reader = file_reader(tmp_path / "lib.mpich.mpir.json", "mpich")
    found = client_verdicts(latencies, reader)
    measured = {("allreduce", 2): {"ch4_beta": (1024, 2048), "posix_mpir": tuple(sizes[6:])}}
    fixed = corrections(found, best_choices(latencies, measured))
    mpich.export(corrected_table(table, fixed), tmp_path / "fixed")
    return found, fixed


def corrected_two_nodes(table, base: Path):
    """verify-export's corrected export at ``base`` of ``table`` measured at 2 nodes x 1
    rank (its entries moved there), judged by a synthetic C client at that shape: the
    file gains nothing, the candidate mpir_ring, an arm of its own, halves the time from
    64K; the corrections as written (the C client's shape's entries replaced)."""
    from collectives.shape import JobShape
    from osu_dl_bench.selection.exports import mpich
    from osu_dl_bench.selection.exports.verification import (
        FILE_ARM,
        NULL_ARM,
        best_choices,
        client_pairs,
        corrected_table,
        corrections,
        own_code_only,
        verdicts,
    )

    two_nodes = lambda nprocs: JobShape(nprocs, 2, 1)  # noqa: E731
    table = on_nodes(table, 2)
    sizes = [1024 << k for k in range(11)]  # 1K .. 1M
    factors = {
        FILE_ARM: dict.fromkeys(sizes, 1.0),
        "mpir_ring": {s: 0.5 if s >= 64 << 10 else 1.0 for s in sizes},
    }
    latencies = synthetic_latencies(factors)
    measured, _ = own_code_only({("allreduce", 2): {"mpir_ring": tuple(sizes)}}, two_nodes)
    found = verdicts(
        "c", client_pairs(latencies, FILE_ARM), client_pairs(latencies, NULL_ARM), lambda *a: None
    )
    fixed = corrections(found, best_choices(latencies, measured))
    corrected = corrected_table(table, fixed, two_nodes)
    mpich.export(corrected, base)
    return corrected


def on_nodes(table, nodes: int):
    """``table`` with each library entry measured on ``nodes`` nodes, ranks spread evenly."""
    from dataclasses import replace

    tuning = table.header["library_tuning"]
    entries = [{**e, "nodes": nodes, "ppn": e["nprocs"] // nodes} for e in tuning["entries"]]
    header = {**table.header, "library_tuning": {**tuning, "entries": entries}}
    return replace(table, header=header)
