"""bench's terminal tables on COMM_SELF: one candidate's table comes out row by row as
each size is measured, --bounds or not (the bounds' tables follow it)."""

from __future__ import annotations

import pytest
from mpi4py import MPI

from osu_dl_bench.cli import build_parser
from osu_dl_bench.commands import bench
from osu_dl_bench.commands.bench_cli import config_from_args

SIZES = (8, 16, 32)


def _config(*extra: str):
    argv = ["bench", "allreduce", "-a", "native", "-m", "8:32", "-i", "2", "-x", "1", *extra]
    return config_from_args(build_parser().parse_args(argv))


@pytest.mark.parametrize("extra", [(), ("--bounds",)])
def test_one_candidates_rows_come_out_as_each_size_is_measured(monkeypatch, capsys, extra):
    printed_by_size = []
    measure = bench.measure_collective

    def watched(*args):
        for records in measure(*args):
            yield records
            printed_by_size.append(capsys.readouterr().out)  # once the size is reported

    monkeypatch.setattr(bench, "measure_collective", watched)
    assert bench.run_bench(MPI.COMM_SELF, _config(*extra)) == 0
    rows = [
        [line.split()[0] for line in out.splitlines() if line[:1].isdigit()]
        for out in printed_by_size
    ]
    assert rows == [[str(size)] for size in SIZES]
    assert "# Algorithm: native  Backend: mpi" in printed_by_size[0]
    rest = capsys.readouterr().out
    if extra:
        assert "# Algorithm: copy  Backend: bound" in rest and "# Bound: numpy's copy" in rest
        assert [line.split()[0] for line in rest.splitlines() if line[:1].isdigit()] == [
            str(size) for size in SIZES
        ]
    else:
        assert rest == ""
