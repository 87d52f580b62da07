"""``osu-dl-bench compare``: decision stability and regret of one run's (or a table's)
choices on another run, shifts between two sweeps and one scored as the other's
prediction, on hand-made medians and synthetic run directories; the whole command."""

import subprocess
import sys

import pandas as pd
import pytest
from support.tuning import label, launch_run, make_entry, make_table, model_points, write_run

from osu_dl_bench.cli import main
from osu_dl_bench.commands import compare
from osu_dl_bench.selection import build_table
from osu_dl_bench.selection.paired import Ratio

pytestmark = pytest.mark.usefixtures("registered")


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


def _figures(stable, regrets):
    """Figures of hand-made points: (ratio, low, high) regrets, ``stable`` of them stable."""
    ratios = tuple(Ratio(r, lo, hi, 3, 60) for r, lo, hi in regrets)
    return compare.Figures(len(regrets), stable, ratios)


def test_the_figures_count_misses_by_the_interval_and_print_facts_without_verdicts():
    good = _figures(20, [(1.0, 1.0, 1.0)] * 19 + [(1.08, 1.04, 1.12)])  # straddles 1.05
    assert good.unclear == 1 and good.slower == 0
    assert compare.figures_text("p=2", good) == (
        "# p=2: stability 100.0%, points more than 5% slower by the interval 0, "
        "median regret 1.000, max 1.080"
    )
    missed = _figures(20, [(1.0, 1.0, 1.0)] * 19 + [(1.08, 1.06, 1.1)])
    assert missed.slower == 1 and "interval 1," in compare.figures_text("x", missed)
    unstable = _figures(18, [(1.0, 1.0, 1.0)] * 20)
    assert unstable.stability == 0.9 and "stability 90.0%" in compare.figures_text("x", unstable)
    costly = _figures(3, [(1.02, 1.0, 1.04)] * 3)
    assert "median regret 1.020" in compare.figures_text("x", costly)
    assert "target" not in compare.figures_text("x", costly)
    assert "no choice was measured" in compare.figures_text("x", _figures(0, []))


def test_identical_runs_are_fully_stable_with_no_regret(tmp_path):
    plan = {
        1024: {"recursive_doubling": 0.9, "rabenseifner": 1.1},
        65536: {"recursive_doubling": 1.1, "rabenseifner": 0.8},
        1 << 20: {"recursive_doubling": 1.3, "rabenseifner": 1.2},
    }
    a = launch_run(tmp_path / "a", plan)
    b = launch_run(tmp_path / "b", plan)
    judged = compare.judged_points(str(a), str(b))
    assert [j.choice for j in judged] == ["recursive_doubling", "rabenseifner", "native"]
    figures = compare.Figures.of(judged)
    assert (figures.points, figures.stability, figures.median_regret) == (3, 1.0, 1.0)
    assert figures.slower == 0


def test_a_choice_another_run_finds_slower_is_unstable_and_a_miss(tmp_path):
    a = launch_run(tmp_path / "a", {65536: {"recursive_doubling": 0.8, "rabenseifner": 1.0}})
    b = launch_run(tmp_path / "b", {65536: {"recursive_doubling": 1.0, "rabenseifner": 0.8}})
    (judged,) = compare.judged_points(str(a), str(b))
    assert judged.choice == "recursive_doubling" and not judged.stable
    assert judged.point.best == "rabenseifner"
    assert judged.regret.ratio == pytest.approx(1.25, rel=0.02) and judged.regret.low > 1.05
    report = compare.decision_report(str(a), str(b))
    assert "points more than 5% slower by the interval 1" in report
    assert "regret 1.2" in report and ": more than 5% slower" in report


def test_a_table_is_judged_by_the_selectors_choice_and_twins_count_as_one(tmp_path):
    ring_0, ring_1m = label("allreduce", "ring:seg=0"), label("allreduce", "ring:seg=1M")
    b = launch_run(tmp_path / "b", {65536: {ring_1m: 0.7, "rabenseifner": 1.0}})
    # seg=0 and seg=1M are twins at 64 KiB over 2 ranks (32 KiB blocks): the same code.
    table = tmp_path / "t.json"
    make_table(make_entry(2, [(0, "ring:seg=0")])).write(table)
    (judged,) = compare.judged_points(str(b), str(b), str(table))
    assert judged.choice == ring_1m != ring_0 and judged.stable
    assert judged.regret.ratio == 1.0


def _runs(tmp_path):
    a = write_run(tmp_path / "a", model_points(nprocs_list=(2,), collectives=("allreduce",)))
    # B: the same measurements on a machine 1.5x slower throughout (its decisions are A's)
    slower = model_points(nprocs_list=(2,), collectives=("allreduce",))
    for point in slower:
        for name in ("median_us", "q1_us", "q3_us", "min_us", "max_us", "spread_us"):
            object.__setattr__(point, name, getattr(point, name) * 1.5)
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
    assert lines[0].startswith(f"# decisions: table {table}'s choices (the selector's) on {b}")
    row = next(line for line in lines if line.startswith("allreduce cpu p=2"))
    assert row.split()[3:5] == ["12", "100.0%"]  # 12 sizes, every choice in B's tie set
    assert any(line.startswith("# p=2: stability 100.0%") for line in lines)
    shifts = lines.index(f"# {a} against {b}: 72 points measured by both")
    p2 = lines[shifts + 2].split()
    assert p2[:2] == ["2", "72"] and 39.5 < float(p2[2].rstrip("%")) < 41.5  # ln 1.5 = 40.5%
    assert out.read_text() == f"# command: osu-dl-bench {' '.join(argv[:-2])}\n{res.stdout}"


def test_runs_without_results_or_shared_points_are_refused(tmp_path, capsys):
    a, b = _runs(tmp_path)
    assert main(["compare", str(a), str(tmp_path / "none")]) == 2
    assert "none: no results.csv (expected a sweep's run directory)" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--nprocs", "3"]) == 2
    assert "share no measured point" in capsys.readouterr().err
