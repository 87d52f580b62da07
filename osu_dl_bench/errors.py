"""Exceptions shared by every layer of the suite."""

from collectives.errors import UsageError

__all__ = ["UsageError", "ValidationFailure"]


class ValidationFailure(RuntimeError):
    """A collective produced wrong elements (exit code 1, as OSU and nccl-tests do)."""
