"""mpi4py.MPI's public names, with mpi4py.MPI imported on the first name asked for.

Importing mpi4py.MPI initialises MPI, at the thread level set in ``mpi4py.rc`` before that
import (https://mpi4py.readthedocs.io/en/stable/mpi4py.html#mpi4py.rc). The algorithm
modules reach MPI through this module (``mpi.IN_PLACE``, ``mpi.Request.Waitall``) and only
inside functions, so importing them, and with them the registry's catalog, starts no MPI.

The first name asked for (PEP 562's module ``__getattr__``) loads mpi4py.MPI, binds all
its public names here as plain module attributes and removes ``__getattr__``: CPython
specialises attribute reads only on modules without one (Python/specialize.c), so from
then on ``mpi.IN_PLACE`` costs what ``MPI.IN_PLACE`` does. Objects that keep an MPI
handle of their own (a reduction's MPI.Op) receive it through ``when_loaded``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

# Callbacks waiting for mpi4py.MPI; None once it is loaded here.
_waiting: list[Callable[[Any], None]] | None = []


def when_loaded(callback: Callable[[Any], None]) -> None:
    """Call ``callback(mpi4py.MPI)`` once MPI is loaded here: now, if it already is."""
    if _waiting is None:
        callback(sys.modules["mpi4py.MPI"])
    else:
        _waiting.append(callback)


def load() -> Any:
    """mpi4py.MPI, imported (which starts MPI unless it runs already), its public names
    bound here and the ``when_loaded`` callbacks run."""
    global _waiting
    from mpi4py import MPI

    if _waiting is not None:
        namespace = globals()
        namespace.update({k: v for k, v in vars(MPI).items() if not k.startswith("_")})
        namespace.pop("__getattr__", None)
        callbacks, _waiting = _waiting, None
        for callback in callbacks:
            callback(MPI)
    return MPI


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        # Tools probe modules for dunders (__path__, __wrapped__): that must not start MPI.
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(load(), name)
