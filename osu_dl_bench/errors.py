"""Exceptions shared by every layer of the suite."""


class UsageError(ValueError):
    """Bad input from the user: one message (rank 0) and exit code 2 on every rank.

    ``agreed`` is set once every rank of the job is known to have failed (an agreement
    step exchanged the verdicts); an error raised on some ranks only is not agreed, and
    the entry point settles it with the others or aborts the job.
    """

    def __init__(self, message: str, *, agreed: bool = False) -> None:
        super().__init__(message)
        self.agreed = agreed


class ValidationFailure(RuntimeError):
    """A collective produced wrong elements (exit code 1, as OSU and nccl-tests do)."""
