"""The list subcommand's option, parsed into a ListConfig."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class ListConfig:
    """Which collective's algorithms to list (None: every collective's)."""

    collective: str | None


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the list options."""
    parser.add_argument("collective", nargs="?", default=None, help="only this collective")


def config_from_args(args: argparse.Namespace) -> ListConfig:
    """The ListConfig of parsed arguments."""
    return ListConfig(args.collective)
