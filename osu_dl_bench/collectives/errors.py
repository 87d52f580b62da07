"""Exceptions of the collectives package (which imports nothing else of osu_dl_bench here)."""


class CollectiveError(ValueError):
    """A collective call refused on every rank alike, before it copied anything."""


class CountMismatch(CollectiveError):
    """Ranks passed one collective call different byte counts (or element types, roots,
    or buffers it cannot use): MPI calls it an erroneous program; MPICH's own collectives
    stop with "Message truncated". Raised on every rank with the same message, after the
    ranks exchanged what they passed: a rank that catches it (as a ValueError) leaves no
    peer waiting for it."""
