"""Exceptions shared by every layer of the suite."""


class UsageError(ValueError):
    """Bad input from the user: every rank reaches the same verdict and exits with code 2."""


class ValidationFailure(RuntimeError):
    """A collective produced wrong elements (exit code 1, as OSU and nccl-tests do)."""
