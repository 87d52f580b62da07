"""The plot command writes readable PNGs for a synthetic run (matplotlib, Agg)."""

import pytest
from mpirun import run_cli
from support.tuning import model_points, write_run

pytest.importorskip("matplotlib")

from osu_dl_bench.commands.plot import plot_run  # noqa: E402
from osu_dl_bench.selection import build_table  # noqa: E402

pytestmark = pytest.mark.usefixtures("registered")
PNG = b"\x89PNG\r\n\x1a\n"


def _expected(shapes):
    names = []
    for coll in ("allreduce", "bcast"):
        for p in shapes:
            stem = f"{coll}_cpu_p{p}_1x{p}"
            names += [f"{stem}_latency.png", f"{stem}_busbw.png", f"{stem}_ratios.png"]
        names += [f"{coll}_cpu_speedup.png", f"{coll}_cpu_winners.png"]
    return sorted(names)


def test_plots_of_a_run(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2, 4)))
    written = plot_run(str(run))
    assert sorted(p.name for p in written) == _expected((2, 4))
    for path in written:
        assert path.parent == run / "plots" and path.read_bytes()[:8] == PNG
        assert path.stat().st_size > 10_000  # lines, bands and labels, not an empty canvas


def test_plots_with_a_given_table_into_a_given_directory(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,), sizes=[8, 4096, 1 << 20]))
    table, _ = build_table(run, "t")
    target = tmp_path / "elsewhere"
    written = plot_run(str(run), str(table.write(tmp_path / "t.json")), str(target))
    assert sorted(p.name for p in written) == _expected((2,))
    assert all(p.parent == target for p in written) and not (run / "plots").exists()


def test_plot_command(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(3,), sizes=[8, 1024, 1 << 20]))
    res = run_cli(1, ["plot", str(run)], timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("# wrote ") == len(_expected((3,)))
    assert (run / "plots" / "allreduce_cpu_winners.png").exists()
