"""Exceptions of the collectives package (it imports nothing of the application above it)."""


class UsageError(ValueError):
    """Bad input from the user: one message (rank 0) and exit code 2 on every rank.

    ``agreed`` is set once every rank of the job is known to have failed (an agreement
    step exchanged the verdicts); an error raised on some ranks only is not agreed, and
    the entry point settles it with the others or aborts the job.
    """

    def __init__(self, message: str, *, agreed: bool = False) -> None:
        super().__init__(message)
        self.agreed = agreed


class CollectiveError(ValueError):
    """A collective call refused on every rank alike, before it copied anything."""


class CountMismatch(CollectiveError):
    """Ranks passed one collective call different byte counts (or element types, roots,
    or buffers it cannot use): MPI calls it an erroneous program; MPICH's own collectives
    stop with "Message truncated". Raised on every rank with the same message, after the
    ranks exchanged what they passed: a rank that catches it (as a ValueError) leaves no
    peer waiting for it."""
