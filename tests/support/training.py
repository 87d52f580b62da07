"""What the trainer's multi-rank tests share (helpers only, no tests here)."""

from __future__ import annotations

import importlib.util

import pytest

_MISSING = [m for m in ("torch", "sklearn") if importlib.util.find_spec(m) is None]
# A module's pytestmark where it trains: skipped, saying what to install, without them.
needs_train_extras = pytest.mark.skipif(
    bool(_MISSING),
    reason=f"{', '.join(_MISSING)} not installed: pip install 'osu-dl-bench[train]'",
)
# The cnn's gradients (~150 KB) in 3 buckets: 131 KB, 18 KB and 640 B, so that overlap is
# exercised and the buckets fall on both sides of the p=2 table's 64 KiB boundary.
SMALL_BUCKETS = ["--first-bucket", "4K", "--bucket-cap", "16K"]
