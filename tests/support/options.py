"""A command's frozen config from its options, parsed as `osu-dl-bench NAME ARGS` parses
them (the CLI's own parser, its verbatim values included), wherever the command keeps its
parser and config class."""

from __future__ import annotations

from typing import Any

from osu_dl_bench.cli import build_parser, command_module, verbatim_values


def command_config(name: str, *argv: str) -> Any:
    """The config ``osu-dl-bench NAME ARGV`` runs with."""
    args = build_parser().parse_args(verbatim_values([name, *argv]))
    return command_module(name).config_from_args(args)
