"""``osu-dl-bench compare``: shifts between two sweeps and one scored as the other's
prediction, on hand-made medians; a tuning table's choices scored on another run; the
whole command on synthetic run directories."""

import subprocess
import sys

import pandas as pd
import pytest
from support.tuning import model_points, write_run

from osu_dl_bench.cli import main
from osu_dl_bench.commands import compare
from osu_dl_bench.selection import build_table


def _run(rows, device="cpu"):
    return pd.DataFrame(
        [(device, "float32", "sum", "allreduce", 2, size, alg, us, 0.1) for size, alg, us in rows],
        columns=[*compare.KEY, "median_us", "spread"],
    )


def test_a_common_shift_is_not_a_reordering():
    a = _run([(1 << 20, "native", 100.0), (1 << 20, "ring", 50.0), (1 << 20, "cma", 40.0)])
    # The machine got 2x slower for everyone, and cma alone 10% slower still.
    b = _run([(1 << 20, "native", 200.0), (1 << 20, "ring", 100.0), (1 << 20, "cma", 88.0)])
    both = compare.paired_points(a, b).set_index("algorithm")
    assert both.loc["ring", "shift"] == pytest.approx(2.0)
    assert both.loc["ring", "relative"] == pytest.approx(1.0)
    assert both.loc["cma", "relative"] == pytest.approx(1.1)
    # a as the prediction of b: 1 - |100 - 200| / 200 = 0.5
    assert both.loc["native", "accuracy"] == pytest.approx(0.5)
    text = compare.shift_report(both.reset_index(), "A", "B")
    assert "33%" in text.splitlines()[2]  # one of three points moved > 5% relative to its point


def test_points_of_different_buffer_kinds_are_not_paired():
    a = _run([(8, "native", 1.0)], device="cpu-registered")
    b = pd.concat([_run([(8, "native", 2.0)], device="cpu"), _run([(8, "native", 1.5)])])
    assert compare.paired_points(a, b).empty
    b_registered = _run([(8, "native", 3.0)], device="cpu-registered")
    assert compare.paired_points(a, b_registered)["shift"].tolist() == [3.0]


def test_the_targets_are_met_only_within_five_percent_everywhere():
    assert compare.target_verdict("x", [1.0, 1.02, 1.04], [0.5, 1.0, 1.05]).endswith(
        "meets the targets (best <= 1.05 everywhere, median <= 1.03, native <= 1.05)"
    )
    assert "-> misses" in compare.target_verdict("x", [1.0, 1.0, 1.06], [1.0, 1.0, 1.0])
    assert "-> misses" in compare.target_verdict("x", [1.04, 1.04, 1.0], [1.0, 1.0, 1.0])
    assert "-> misses" in compare.target_verdict("x", [1.0], [1.06])
    assert "not measured" in compare.target_verdict("x", [], [])


def _runs(tmp_path):
    a = write_run(tmp_path / "a", model_points(nprocs_list=(2,), collectives=("allreduce",)))
    slower = model_points(nprocs_list=(2,), collectives=("allreduce",), seed=8)
    for point in slower:
        object.__setattr__(point, "median_us", point.median_us * 1.5)
    return a, write_run(tmp_path / "b", slower)


def test_compare_prints_both_reports_and_writes_them(tmp_path):
    a, b = _runs(tmp_path)
    table = tmp_path / "t.json"
    build_table(a, "t")[0].write(table)
    out = tmp_path / "report.txt"
    argv = ["compare", str(a), str(b), "--table", str(table), "--nprocs", "2", "--out", str(out)]
    res = subprocess.run(
        [sys.executable, "-m", "osu_dl_bench", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"# {a} against {b}: 72 points measured by both"
    p2 = lines[2].split()
    assert p2[:2] == ["2", "72"] and 39.5 < float(p2[2].rstrip("%")) < 41.5  # ln 1.5 = 40.5%
    assert f"# table {table} checked against the separate run {b}" in lines
    assert lines[-1].startswith("# allreduce p=2 (cpu): chosen/best median 1.000")
    assert out.read_text() == f"# command: osu-dl-bench {' '.join(argv[:-2])}\n{res.stdout}"


def test_runs_without_results_or_shared_points_are_refused(tmp_path, capsys):
    a, b = _runs(tmp_path)
    assert main(["compare", str(a), str(tmp_path / "none")]) == 2
    assert "none: no results.csv (expected a sweep's run directory)" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--nprocs", "3"]) == 2
    assert "share no measured point" in capsys.readouterr().err
