"""Where the strict cupy stand-in lives: put it first on PYTHONPATH and ``import cupy``
finds it (tests/support/strict_cupy/cupy/__init__.py says what it models)."""

from pathlib import Path

STRICT_CUPY = Path(__file__).resolve().parent / "strict_cupy"
