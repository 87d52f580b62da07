"""argparse value types and help texts that several subcommands' options share.

Loaded to build the parser, before MPI: nothing here imports the registry.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from osu_dl_bench.selection.names import INDIFFERENCE, RISK

# Declared here, not in collectives.buffers: options are parsed before MPI is loaded.
DEVICE_HELP = (
    "buffer kind: cpu (numpy), cpu-registered (numpy in memory the node's ranks can map, "
    "as NCCL's registered buffers: the cma algorithms then copy with plain loads) or "
    "cuda (cupy)"
)


def whole_number(least: int, most: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``least`` to ``most``."""

    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-")
        value = int(text) if digits.isdigit() and len(digits) <= 20 else least - 1
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {least} to {most}, got {text!r}"
            )
        return value

    return parse


def whole_number_from(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``least``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {text!r}")
        return value

    return parse


positive_int = whole_number_from(1)
non_negative_int = whole_number_from(0)


def seconds_up_to(limit: float) -> Callable[[str], float]:
    """An argparse type: seconds in (0, limit]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 0 < value <= limit:
            raise argparse.ArgumentTypeError(f"expected seconds in (0, {limit:g}], got {text!r}")
        return value

    return parse


def seconds_from(least: float, limit: float, why: str) -> Callable[[str], float]:
    """An argparse type: seconds in [least, limit], ``why`` naming the floor's reason."""

    def parse(text: str) -> float:
        value = seconds_up_to(limit)(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"expected at least {least:g} s ({why}), got {text!r}")
        return value

    return parse


def whole_number_up_to(limit: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to ``limit``."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"expected at most {limit}, got {value}")
        return value

    return parse


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0 (seconds_up_to for no limit)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


# --spread's ceiling: a week. Longer waits are a typo, and a deadline past what the clock
# (time_t) can hold would crash the sweep after its first launch.
MAX_SPREAD_MINUTES = 7 * 24 * 60


def positive_minutes(text: str) -> float:
    """An argparse type: a number of minutes > 0 and at most MAX_SPREAD_MINUTES (a week)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= MAX_SPREAD_MINUTES:
        raise argparse.ArgumentTypeError(
            f"expected a number of minutes > 0 and at most {MAX_SPREAD_MINUTES} (a week), "
            f"got {text!r}"
        )
    return value


def output_stem(text: str) -> str:
    """An argparse type: the path of outputs named by adding suffixes (OUT.txt, OUT.json,
    the run directory OUT), without a trailing '/' ('runs/x/' is 'runs/x')."""
    path = Path(text)
    if path.name in ("", ".", ".."):
        raise argparse.ArgumentTypeError(
            f"expected a name the outputs are named after, e.g. runs/train, got {text!r}"
        )
    return str(path)


def probability(text: str) -> float:
    """An argparse type: a probability from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return value


def zone(text: str) -> float:
    """An argparse type: an indifference zone, a fraction from 0 up to (not including) 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text}")
    return value


def add_rule_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the decision rule's options (selection.rule.DecisionRule), one default each."""
    parser.add_argument(
        "--risk",
        type=probability,
        default=RISK,
        metavar="P",
        help="a candidate may replace native only where the chance that it is more than 5%% "
        f"slower than native is at most P (default {RISK})",
    )
    parser.add_argument(
        "--indifference",
        type=zone,
        default=INDIFFERENCE,
        metavar="FRACTION",
        help="a candidate replaces native only where its expected gain exceeds this zone, "
        f"and candidates within it of the best count as tied (default {INDIFFERENCE})",
    )


def add_stall_timeout_argument(parser: argparse.ArgumentParser) -> None:
    """--stall-timeout SECONDS, as sweep and train-bench take it: a job that writes
    nothing for this long is stopped, with its ranks' heartbeats reported."""
    from osu_dl_bench.jobs.sweep_config import (
        DEFAULT_STALL_TIMEOUT,
        MAX_STALL_TIMEOUT,
        MIN_STALL_TIMEOUT,
    )

    parser.add_argument(
        "--stall-timeout",
        type=seconds_from(
            MIN_STALL_TIMEOUT, MAX_STALL_TIMEOUT, "three heartbeat periods of a healthy job"
        ),
        default=DEFAULT_STALL_TIMEOUT,
        metavar="SECONDS",
        help=f"stop a job that reports no progress for this long "
        f"(default {DEFAULT_STALL_TIMEOUT:g})",
    )
