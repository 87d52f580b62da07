"""scripts/bench_collectives.py's job on COMM_SELF: its memory-copy bound is bench --bounds'
copy (measurement.bounds), timed by the kernel's loop, one row per size."""

from __future__ import annotations

import json
from pathlib import Path

from mpi4py import MPI
from support.scripts import load_script

from osu_dl_bench.measurement import bounds

REPO = Path(__file__).resolve().parents[2]
SIZES = (1 << 10, 4 << 10)


def test_the_copy_bound_is_bench_bounds_copy_timed_once_per_size(tmp_path, monkeypatch):
    script = load_script("bench_collectives")
    monkeypatch.setattr(script, "SIZES", SIZES)
    monkeypatch.setattr(script, "COLLECTIVES", ("bcast",))
    monkeypatch.setattr(script, "ITERATIONS", dict.fromkeys(SIZES, 3))
    built = []
    real = bounds.bound_calls

    def spied(device, xp, count, dtype, spec, rank):
        built.append((device, count * dtype.itemsize))
        return real(device, xp, count, dtype, spec, rank)

    monkeypatch.setattr(bounds, "bound_calls", spied)
    out = tmp_path / "record.json"
    assert script.worker(MPI.COMM_SELF, "single", "cpu", 0, str(out), 0.005) == 0
    copies = [row for row in json.loads(out.read_text())["rows"] if row["collective"] == "memcpy"]
    assert built == [("cpu", size) for size in SIZES]
    assert [row["size"] for row in copies] == list(SIZES) and all(r["us"] > 0 for r in copies)
