"""The recorded command line: one function writes it (runtime.metadata.command_line), in
one spelling that a shell takes back, under one key in every record."""

from __future__ import annotations

import ast
import dataclasses
import shlex
import sys
from pathlib import Path

import pytest
from mpirun import REPO

from osu_dl_bench import cli
from osu_dl_bench.runtime.metadata import COMMAND_KEY, RunMetadata, command_line

HOME = Path("osu_dl_bench/runtime/metadata.py")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # the console script, and `python -m osu_dl_bench`, both name the console script
        (["/venv/bin/osu-dl-bench", "sweep", "-o", "my run"], "osu-dl-bench sweep -o 'my run'"),
        (["/src/osu_dl_bench/__main__.py", "tune", "r"], "osu-dl-bench tune r"),
        # a module of the package run as a job (`python -m MODULE`: argv[0] is its path)
        (
            [str(REPO / "osu_dl_bench/commands/calibration_job.py"), "run", "-m", "8:64"],
            "python -m osu_dl_bench.commands.calibration_job run -m 8:64",
        ),
        # a script run by its path keeps its path
        (["scripts/bench_collectives.py", "--np", "2"], "scripts/bench_collectives.py --np 2"),
        ([], "osu-dl-bench"),
    ],
)
def test_the_command_line_names_the_program_and_quotes_each_word(argv, expected):
    assert command_line(argv) == expected


def test_cli_main_records_the_arguments_it_was_given_and_forgets_them(monkeypatch):
    # An in-process caller (a test, a notebook): sys.argv is its own command line.
    monkeypatch.setattr(sys, "argv", ["/venv/bin/pytest", "-q"])
    seen = []
    compare = cli.command_module("compare")
    monkeypatch.setattr(compare, "start", lambda cfg: seen.append(command_line()) or 0)
    assert cli.main(["compare", "run a", "b"]) == 0
    assert seen == ["osu-dl-bench compare 'run a' b"]
    assert command_line() == "osu-dl-bench -q"


def test_the_run_metadata_keeps_it_under_the_one_key():
    assert COMMAND_KEY in {field.name for field in dataclasses.fields(RunMetadata)}


def test_this_process_gets_a_command_line_a_shell_splits_back():
    assert shlex.split(command_line())


def _places(found) -> list[str]:
    """'path:line' of every node of the package's sources (runtime.metadata, the one home,
    left out) for which ``found(node)`` holds."""
    places = []
    for path in sorted((REPO / "osu_dl_bench").rglob("*.py")):
        if path.relative_to(REPO) != HOME:
            tree = ast.parse(path.read_text())
            places += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(tree) if found(n)]
    return places


def _uses_sys_argv(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr == "argv" and getattr(n.value, "id", "") == "sys"
        for n in ast.walk(node)
    )


def _joins_sys_argv(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "join"
        and (_uses_sys_argv(node))
    )


def _command_key_spelled_out(node: ast.AST) -> bool:
    keys = node.keys if isinstance(node, ast.Dict) else []
    return any(isinstance(key, ast.Constant) and key.value == COMMAND_KEY for key in keys)


def test_only_the_one_home_builds_a_command_line_from_sys_argv():
    builders = _places(_joins_sys_argv)
    assert builders == [], f"call runtime.metadata.command_line instead: {builders}"


def test_every_record_keeps_the_command_line_under_the_one_key():
    spelled_out = _places(_command_key_spelled_out)
    assert spelled_out == [], f"write the key as runtime.metadata.COMMAND_KEY: {spelled_out}"
