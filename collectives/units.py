"""Option text without MPI: byte sizes with K/M/G suffixes (OSU's -m), size loops and
algorithm lists."""

from __future__ import annotations

import re

from collectives.errors import UsageError

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


# More digits than any byte count needs; Python refuses to convert beyond 4300 anyway.
_MAX_DIGITS = 30


def parse_size(text: str) -> int:
    """Parse '8', '64K', '16M' or '1G' into bytes (powers of 1024)."""
    match = _SIZE.match(text)
    if not match or len(match.group(1)) > _MAX_DIGITS:
        shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
        raise UsageError(f"bad size {shown!r}: expected a whole number with an optional K, M or G")
    return int(match.group(1)) * _SUFFIX[match.group(2).upper()]


# tc's rate units (tc(8), "RATES"): bit for bits per second, bps for bytes per second,
# decimal prefixes.
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps)\s*$", re.IGNORECASE)
_RATE_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_link_rate(text: str) -> float:
    """Bytes per second of a rate in tc's units ('1gbit', '250mbit', '10mbps')."""
    match = _RATE.match(text)
    if not match:
        raise ValueError(f"expected a rate such as 1gbit or 250mbit, got {text!r}")
    value, prefix, unit = match.groups()
    per_second = float(value) * _RATE_PREFIX[prefix.lower()]
    return per_second / 8 if unit.lower() == "bit" else per_second


def doubling_sizes(lo: int, hi: int) -> list[int]:
    """OSU's size loop: lo, 2 lo, 4 lo, ... up to hi (0 is followed by 1)."""
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size = size * 2 if size else 1
    return sizes


def format_size(nbytes: int) -> str:
    """The shortest exact K/M/G spelling of a byte count: 262144 -> '256K'."""
    for suffix in ("G", "M", "K"):
        unit = _SUFFIX[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def split_variant_texts(text: str) -> list[str]:
    """'native,chain:seg=64K,k=2,ring' -> ['native', 'chain:seg=64K,k=2', 'ring']: an item
    'NAME=VALUE' without ':' is another parameter of the previous variant."""
    texts: list[str] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if "=" in item and ":" not in item and texts:
            texts[-1] += "," + item
        else:
            texts.append(item)
    return texts
