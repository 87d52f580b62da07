"""``osu-dl-bench compare``: its options parsed into a CompareConfig, the report in words
(selection.comparison gives the numbers, see test_comparison), and the whole command."""

import dataclasses
import shlex
import subprocess
import sys

import pytest
from support.comparison import figures, shifted_medians
from support.tuning import launch_run, model_points, write_run

from osu_dl_bench.cli import build_parser, main
from osu_dl_bench.commands import compare
from osu_dl_bench.commands.compare_cli import config_from_args
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection import build_table
from osu_dl_bench.selection.comparison import paired_points
from osu_dl_bench.selection.pools import pool_dir
from osu_dl_bench.selection.rule import DEFAULT_RULE, rule_text

pytestmark = pytest.mark.usefixtures("registered")


def _config(*argv):
    return config_from_args(build_parser().parse_args(["compare", *argv]))


def test_the_options_make_a_frozen_config_that_keeps_nprocs_as_given(tmp_path):
    cfg = _config("a", "b", "--np", "4,2-3", "--table", "t.json", "--out", str(tmp_path / "r"))
    assert (cfg.run_a, cfg.run_b, cfg.table, cfg.nprocs) == ("a", "b", "t.json", (2, 3, 4))
    assert cfg.nprocs_text == "4,2-3"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.nprocs = ()
    assert _config("a", "b").nprocs == ()


def test_a_bad_nprocs_or_out_is_refused_when_the_options_are_parsed(tmp_path):
    with pytest.raises(UsageError, match="--nprocs 0: process counts must be >= 1"):
        _config("a", "b", "--nprocs", "0")
    with pytest.raises(UsageError, match="--out"):
        _config("a", "b", "--out", str(tmp_path))  # a directory, not a file
    with pytest.raises(UsageError, match="--referee b/: the same run as RUN_B"):
        _config("a", "b", "--referee", "b/")


def test_a_run_compared_with_itself_is_refused_and_nothing_is_written(tmp_path, capsys):
    a, _ = _runs(tmp_path)
    link = tmp_path / "a-link"
    link.symlink_to(a)
    before = sorted(p.name for p in a.iterdir())
    for other in (str(a), f"{a}/", str(link)):
        assert main(["compare", str(a), other]) == 2
        err = capsys.readouterr().err
        assert f"RUN_A {a} and RUN_B {other}: the same run directory" in err
    assert sorted(p.name for p in a.iterdir()) == before  # no period.json


def test_the_figures_print_facts_without_verdicts():
    good = figures(20, [(1.0, 1.0, 1.0)] * 19 + [(1.08, 1.04, 1.12)])  # straddles 1.05
    assert compare.figures_text("p=2", good) == (
        "# p=2: stability 100.0%, points more than 5% slower by the interval 0, "
        "median regret 1.000, max 1.080, mean 1.004; choices more than 5% slower than "
        "native by the interval: 0 of 0 points (-)"
    )
    missed = figures(20, [(1.0, 1.0, 1.0)] * 19 + [(1.08, 1.06, 1.1)])
    assert "interval 1," in compare.figures_text("x", missed)
    unstable = figures(18, [(1.0, 1.0, 1.0)] * 20)
    assert "stability 90.0%" in compare.figures_text("x", unstable)
    costly = figures(3, [(1.02, 1.0, 1.04)] * 3)
    assert "median regret 1.020" in compare.figures_text("x", costly)
    assert "target" not in compare.figures_text("x", costly)
    assert "no choice was measured" in compare.figures_text("x", figures(0, []))


def test_the_shift_report_gives_the_share_reordered_per_process_count():
    both = paired_points(*shifted_medians())
    lines = compare.shift_report(both, "A", "B").splitlines()
    assert lines[0] == "# A against B: 3 points measured by both"
    assert "33%" in lines[2]  # one of three points moved > 5% relative to its point
    assert lines[2].split()[:2] == ["2", "3"] and lines[3].split()[:2] == ["all", "3"]
    assert lines[2].split()[-1] == "-"  # no size below 64 KiB: a dash, not nan


def test_a_slower_choice_is_named_among_the_points_to_look_at(tmp_path):
    a = launch_run(tmp_path / "a", {65536: {"recursive_doubling": 0.8, "rabenseifner": 1.0}})
    b = launch_run(tmp_path / "b", {65536: {"recursive_doubling": 1.0, "rabenseifner": 0.8}})
    report = compare.decision_report(str(a), str(b))
    assert "points more than 5% slower by the interval 1" in report
    assert "regret 1.2" in report and ": more than 5% slower" in report


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
    assert lines[0].startswith(f"# table {table}: 12 of 12 points from an entry of their own")
    assert lines[1].startswith(f"# decisions: table {table}'s choices (the selector's) on {b}")
    row = next(line for line in lines if line.startswith("allreduce cpu p=2"))
    assert row.split()[3:5] == ["12", "100.0%"]  # 12 sizes, every choice in B's tie set
    assert any(line.startswith("# p=2: stability 100.0%") for line in lines)
    assert any("Euro-Par 2007) report a 2.08% mean performance penalty" in x for x in lines)
    # one launch per run: no held-out split, and no referee given
    assert f"# captured speedup: not given: {b} has 1 launches" in res.stdout
    # Rows without per-round times (these runs'): their intervals are quartiles, so no
    # line about a launch's rounds understating the launch-to-launch variance.
    for run in (a, b):
        assert (
            lines.count(
                f"# warning: {run} has one launch: its intervals hold the rounds' noise only and "
                "understate the launch-to-launch variance (no stored launch-variance pool for "
                f"hosts refhost; MPICH Version: 5.0.2 (4.1) (kept in {pool_dir()})); sweep with "
                "--launches 3, or tune a run of 2 launches or more of these hosts first: its pool "
                "is stored and used here"
            )
            == 0
        ), res.stdout
    shifts = lines.index(f"# {a} against {b}: 72 points measured by both")
    p2 = lines[shifts + 2].split()
    assert p2[:2] == ["2", "72"] and 39.5 < float(p2[2].rstrip("%")) < 41.5  # ln 1.5 = 40.5%
    # The command as given (cli.main's arguments, not pytest's sys.argv); the report names
    # the rule it was decided by.
    assert out.read_text() == f"# command: {shlex.join(['osu-dl-bench', *argv])}\n{res.stdout}"
    assert rule_text(DEFAULT_RULE.as_record()) in res.stdout


def test_the_report_scores_b_choices_on_the_referee_and_prints_agreement_beside_honesty(
    tmp_path, capsys
):
    plan = {1 << 20: {"recursive_doubling": 0.6, "rabenseifner": 0.9}}
    a, b = launch_run(tmp_path / "a", plan), launch_run(tmp_path / "b", plan, seed=5)
    r = launch_run(tmp_path / "r", {1 << 20: {"recursive_doubling": 0.9, "rabenseifner": 0.6}})
    assert main(["compare", str(a), str(b), "--referee", str(r)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"# captured speedup: the choices decided on {b}, scored on the referee {r}," in (
        "\n".join(lines)
    )
    scored = next(line for line in lines if line.startswith("# all: captured speedup"))
    assert scored.startswith("# all: captured speedup 20.") and "over 1 points" in scored
    assert "regret mean 1.49" in scored and "above 1.25: 1 points" in scored
    agreed = next(line for line in lines if line.startswith("# all: agreement within"))
    assert "(point, candidate) pairs (binomial 95% CI " in agreed
    assert "honest intervals of these widths: " in agreed
    # without the referee, B's three launches are too few to hold some out
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"# captured speedup: not given: {b} has 3 launches, a held-out split needs 4" in out
    assert "# all: captured speedup" not in out


def test_a_weak_referee_or_run_a_as_referee_is_said_so_in_one_line_each(tmp_path, capsys):
    plan = {1 << 20: {"recursive_doubling": 0.6}, 1 << 21: {"recursive_doubling": 0.6}}
    a, b = launch_run(tmp_path / "a", plan), launch_run(tmp_path / "b", plan, seed=5)
    one = launch_run(tmp_path / "one", {1 << 20: {"recursive_doubling": 0.6}}, launches=1)
    assert main(["compare", str(a), str(b), "--referee", str(one)]) == 0
    out = capsys.readouterr().out
    assert f"# the referee {one} scores 1 of RUN_B's 2 points (the captured" in out
    assert f"# the referee {one} has 1 launch: its intervals hold the rounds within" in out
    assert "the referee is RUN_A" not in out
    assert main(["compare", str(a), str(b), "--referee", str(a)]) == 0
    out = capsys.readouterr().out
    assert f"# the referee {a} scores 2 of RUN_B's 2 points" in out
    assert f"# the referee is RUN_A ({a}), not a third run: its figures score RUN_B's" in out
    assert "has 1 launch" not in out


def test_runs_without_results_or_shared_points_are_refused(tmp_path, capsys):
    a, b = _runs(tmp_path)
    assert main(["compare", str(a), str(tmp_path / "none")]) == 2
    assert "none: no results.csv (expected a sweep's run directory)" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--nprocs", "3"]) == 2
    assert "share no measured point" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--referee", str(tmp_path / "none")]) == 2
    assert "none: no results.csv: not a sweep run directory" in capsys.readouterr().err


def test_a_table_for_other_process_counts_is_said_to_judge_only_its_fallbacks(tmp_path, capsys):

    a, b = _runs(tmp_path)
    other = write_run(tmp_path / "p4", model_points(nprocs_list=(4,), collectives=("bcast",)))
    table = tmp_path / "t4.json"
    build_table(other, "t4")[0].write(table)
    assert main(["compare", str(a), str(b), "--table", str(table), "--nprocs", "2"]) == 0
    out = capsys.readouterr().out
    assert f"# table {table}: 0 of 12 points from an entry of their own" in out
    assert f"# warning: {table} has no entry for these runs' process counts" in out
