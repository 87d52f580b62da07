"""Collective algorithms: the registry, the facts of each collective and the algorithms.

Importing the package, or a module of it such as ``collectives.errors``, registers nothing
and starts no MPI: the registry imports the algorithm modules on its first question, and
the names below load their modules when first used. Backends whose library or device is
missing register nothing and say why in ``registry.UNAVAILABLE_BACKENDS``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOMES = {
    "Algorithm": "registry",
    "CallContext": "registry",
    "Counterpart": "registry",
    "Variant": "registry",
    "algorithms": "registry",
    "all_algorithms": "registry",
    "distinct_variants": "registry",
    "lookup": "registry",
    "parse_variants": "registry",
    "twin_representatives": "registry",
    "SPECS": "specs",
    "Buffers": "specs",
    "CallShape": "specs",
    "CollectiveSpec": "specs",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
