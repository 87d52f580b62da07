"""The ``osu-dl-bench`` command: subcommands registered in one table, parsed once.

MPI is initialised only after the options are parsed, at the requested thread level;
option errors are printed by rank 0 alone and every rank exits with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from osu_dl_bench import __version__
from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.launcher import launcher_rank
from osu_dl_bench.runtime.metadata import set_cli_arguments
from osu_dl_bench.runtime.start import set_command


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing from every rank and exiting."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}")

    def _print_message(self, message: str, file=None) -> None:
        if message and launcher_rank() == 0:
            super()._print_message(message, file)


# The subcommands, in --help's order. Each is the module osu_dl_bench.commands.<name>_cli
# ('-' as '_'): HELP, add_arguments(parser), config_from_args(args) -> a frozen config, and
# start(config) -> exit code, which starts MPI where the subcommand needs it; the work
# itself is in osu_dl_bench.commands.<name> and the floors below.
COMMANDS = (
    "bench",
    "list",
    "sweep",
    "tune",
    "select",
    "plot",
    "compare",
    "merge",
    "train",
    "train-bench",
    "model",
    "triage",
    "clean",
    "verify-export",
)


def command_module(name: str) -> ModuleType:
    """The module that declares and starts subcommand ``name``."""
    return importlib.import_module(f"osu_dl_bench.commands.{name.replace('-', '_')}_cli")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = _Parser(prog="osu-dl-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"osu-dl-bench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        command = command_module(name)
        command.add_arguments(sub.add_parser(name, help=command.HELP))
    return parser


# Options whose value is itself a launcher's command line: '--launcher-args --mpi=pmix'
# would otherwise read '--mpi=pmix' as sweep's own --mpi.
_VERBATIM_VALUES = ("--launcher-args",)


def verbatim_values(argv: list[str]) -> list[str]:
    """``argv`` with each _VERBATIM_VALUES option joined to the word after it ('OPT=VALUE'),
    so a value starting with '-' stays that option's value."""
    joined, words = [], iter(argv)
    for word in words:
        value = next(words, None) if word in _VERBATIM_VALUES else None
        joined.append(word if value is None else f"{word}={value}")
    return joined


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""

    def body() -> int:
        given = sys.argv[1:] if argv is None else argv
        args = build_parser().parse_args(verbatim_values(given))
        set_command(args.command)
        command = command_module(args.command)
        return command.start(command.config_from_args(args))

    set_cli_arguments(argv)  # what the run records as its command line
    try:
        code = run_guarded(body)
    finally:
        set_cli_arguments(None)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
