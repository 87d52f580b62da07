"""Collective algorithms: the registry, the facts of each collective and the algorithms."""

from osu_dl_bench.collectives import native  # noqa: F401  (registers the native algorithms)
from osu_dl_bench.collectives.registry import (
    Algorithm,
    CallContext,
    Variant,
    algorithms,
    all_algorithms,
    lookup,
    parse_variants,
)
from osu_dl_bench.collectives.specs import SPECS, Buffers, CallShape, CollectiveSpec

__all__ = [
    "SPECS",
    "Algorithm",
    "Buffers",
    "CallContext",
    "CallShape",
    "CollectiveSpec",
    "Variant",
    "algorithms",
    "all_algorithms",
    "lookup",
    "parse_variants",
]
