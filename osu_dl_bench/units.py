"""Byte sizes with K/M/G suffixes, as OSU's -m option takes them."""

from __future__ import annotations

import re

from osu_dl_bench.errors import UsageError

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Parse '8', '64K', '16M' or '1G' into bytes (powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise UsageError(f"bad size {text!r}: expected a whole number with an optional K, M or G")
    return int(match.group(1)) * _SUFFIX[match.group(2).upper()]


def format_size(nbytes: int) -> str:
    """The shortest exact K/M/G spelling of a byte count: 262144 -> '256K'."""
    for suffix in ("G", "M", "K"):
        unit = _SUFFIX[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)
