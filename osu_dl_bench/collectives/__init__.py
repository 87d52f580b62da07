"""Collective algorithms: the registry, the facts of each collective and the algorithms.

Importing this package registers every algorithm; backends whose library or device is
missing register nothing and say why in ``registry.UNAVAILABLE_BACKENDS``.
"""

# Registration order is the order `osu-dl-bench list` and `-a all` show.
from osu_dl_bench.collectives import (  # noqa: F401  (imported to register algorithms)
    allgather,
    allreduce,
    bcast,
    cma,
    hierarchical,
    native,
    reduce,
    reduce_scatter,
    shm,
)
from osu_dl_bench.collectives.backends import gloo, nccl  # noqa: F401
from osu_dl_bench.collectives.registry import (
    Algorithm,
    CallContext,
    Variant,
    algorithms,
    all_algorithms,
    distinct_variants,
    lookup,
    parse_variants,
    twin_representatives,
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
    "distinct_variants",
    "lookup",
    "parse_variants",
    "twin_representatives",
]
