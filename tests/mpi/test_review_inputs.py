"""Inputs a hostile review found mishandled: infinite statistics in a run, segments held
through a second path, FIFOs given as JSON files, and option values that slipped past."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from support.tuning import model_points, write_run

from osu_dl_bench import jsonfile
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.model.platform import PlatformError, load_platform
from osu_dl_bench.selection import build_table
from osu_dl_bench.selection.table import TableError, load_table


def _cli(*args, timeout=60):
    code = "import sys\nfrom osu_dl_bench.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _infinite_native(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,), collectives=("allreduce",)))
    results = RunStore(run).results_path
    lines = results.read_text().splitlines()
    header = lines[0].split(",")
    stats = [header.index(n) for n in ("median_us", "q1_us", "q3_us", "spread_us")]
    out = [lines[0]]
    for line in lines[1:]:
        fields = line.split(",")
        if fields[header.index("algorithm")] == "native":
            for i in stats:
                fields[i] = "1e999"
        out.append(",".join(fields))
    results.write_text("\n".join(out) + "\n")
    return run


def test_rows_with_infinite_statistics_are_dropped_and_counted(tmp_path):
    run = _infinite_native(tmp_path)
    frame, notes = RunStore(run).read()
    assert not frame.empty and "native" not in set(frame["algorithm"])
    assert len(notes) == 1 and "median_us 'inf' is not a finite number" in notes[0]
    table, warnings = build_table(run)
    for point in (p for e in table.entries for p in e.points):
        assert all(math.isfinite(v) for v in point.values() if isinstance(v, float)), point


def test_a_fifo_is_not_read_as_a_table_or_platform(tmp_path):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    with pytest.raises(jsonfile.UnreadableJson, match="not a regular file"):
        jsonfile.load_json(fifo)
    with pytest.raises(TableError, match="not a regular file"):
        load_table(fifo)
    with pytest.raises(PlatformError, match="not a regular file"):
        load_platform(fifo)
    res = _cli("select", "--np", "2", "--size", "8", "--table", str(fifo))
    assert res.returncode == 2 and "not a regular file" in res.stderr, res.stderr
