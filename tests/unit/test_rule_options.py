"""The decision rule's options (--risk, --indifference) on every command that decides:
compare decides both runs by it, sweep --adaptive decides which points are open by it,
and select, which only reads a table, says the rule the table was decided by."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.sweep import sweep_config
from support.tuning import launch_run

from osu_dl_bench.cli import build_parser
from osu_dl_bench.commands import compare
from osu_dl_bench.commands import sweep as sweep_command
from osu_dl_bench.commands.compare_cli import config_from_args as compare_config
from osu_dl_bench.commands.select_cli import config_from_args as select_config
from osu_dl_bench.commands.tune import run_select
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection import build_table
from osu_dl_bench.selection.comparison import decided_points
from osu_dl_bench.selection.evidence import LaunchPool
from osu_dl_bench.selection.rule import DEFAULT_RULE, DecisionRule, rule_text
from osu_dl_bench.selection.summary import table_summary

pytestmark = pytest.mark.usefixtures("registered")

WIDE_ZONE = DecisionRule(0.2, 0.5)  # a 50% zone: a 20% gain is not worth a switch


def _compare(*argv):
    return compare_config(build_parser().parse_args(["compare", "a", "b", *argv]))


def test_compare_takes_the_rule():
    cfg = _compare("--risk", "0.1", "--indifference", "0.03")
    assert cfg.rule() == DecisionRule(0.1, 0.03)
    assert _compare().rule() == DEFAULT_RULE


@pytest.mark.parametrize("argv", [["--risk", "1.5"], ["--indifference", "1"], ["--risk", "x"]])
def test_compare_refuses_a_rule_out_of_range(argv):
    with pytest.raises(UsageError, match=f"argument {argv[0]}: expected a"):
        _compare(*argv)


def test_compare_decides_both_runs_by_the_rule_it_is_given(tmp_path):
    a = launch_run(tmp_path / "a", {65536: {"recursive_doubling": 0.8}})
    b = launch_run(tmp_path / "b", {65536: {"recursive_doubling": 0.8}}, seed=5)
    (default,) = decided_points(str(a)).values()
    (wide,) = decided_points(str(a), WIDE_ZONE).values()
    assert (default.chosen, wide.chosen) == ("recursive_doubling", "native")
    report = compare.decision_report(str(a), str(b), rule=WIDE_ZONE)
    assert "indifference zone 50%" in report


def test_select_says_the_rule_its_table_was_decided_by(tmp_path, capsys):
    run = launch_run(tmp_path / "run", {65536: {"recursive_doubling": 0.8}})
    table, _ = build_table(run, "t", rule=DecisionRule(0.1, 0.03))
    path = tmp_path / "t.json"
    table.write(path)
    cfg = select_config(
        build_parser().parse_args(["select", "--np", "2", "--size", "64K", "--table", str(path)])
    )
    assert run_select(cfg) == 0
    assert (
        f"# table {path}: decision rule: expected loss, risk 0.1 of a choice more than 5% "
        "slower than native, indifference zone 3%"
    ) in capsys.readouterr().out


def test_older_tables_say_what_their_header_holds():
    old = rule_text({"risk": 0.05, "slower_margin": 1.05})
    assert "before expected loss" in old and "risk 0.05" in old
    assert rule_text({}) == "decision rule: not recorded in this table"


def test_sweep_adaptive_takes_the_rule_as_one_object():
    cfg = sweep_config("--np", "2", "--adaptive", "4", "--risk", "0.1", "-o", "r")
    assert cfg.rule == DecisionRule(0.1, DEFAULT_RULE.indifference)
    assert sweep_command.sweep_rule(cfg) == cfg.rule
    plain = sweep_config("--np", "2", "-o", "r")
    assert plain.rule is None and sweep_command.sweep_rule(plain) == DEFAULT_RULE


def test_sweep_refuses_a_rule_without_adaptive():
    with pytest.raises(UsageError, match="--risk and --indifference decide which points"):
        sweep_config("--np", "2", "--indifference", "0.05", "-o", "r")


def test_an_adaptive_sweep_decides_its_open_points_by_its_rule(tmp_path, monkeypatch):
    rules = []
    monkeypatch.setattr(sweep_command, "run_sweep", lambda cfg: 0)
    monkeypatch.setattr(sweep_command, "decision_rows", lambda *a: (None, []))
    settled = SimpleNamespace(open_points=list, decisions={}, pool=LaunchPool())
    monkeypatch.setattr(
        sweep_command.AdaptiveDecisions, "first", lambda *a: rules.append(a[2]) or settled
    )
    cfg = sweep_config(
        "--np", "2", "--adaptive", "4", "--indifference", "0.03", "-o", str(tmp_path / "r")
    )
    assert sweep_command.run_adaptive_sweep(cfg) == 0
    assert rules == [DecisionRule(DEFAULT_RULE.risk, 0.03)]


def test_the_summary_states_the_rule_its_table_was_decided_by(tmp_path):
    run = launch_run(tmp_path / "run", {65536: {"recursive_doubling": 0.8}})
    table, _ = build_table(run, "t", rule=DecisionRule(0.1, 0.03))
    text = table_summary(table)
    assert "# decision rule: expected loss, risk 0.1 of a choice more than 5% slower" in text
    assert "indifference zone 3%; the run's launch pools:" in text
