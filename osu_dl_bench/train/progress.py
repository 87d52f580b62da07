"""Rank 0's progress bar on stderr (redrawn in place at most a few times a second)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30
MIN_INTERVAL = 0.2


class ProgressBar:
    """``[#####.....] 40/100 steps, loss 0.532`` rewritten with carriage returns."""

    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.total, self.enabled = max(total, 1), enabled
        self.stream = stream or sys.stderr
        self._last = 0.0
        self._shown = False

    def update(self, done: int, loss: float) -> None:
        """Show ``done`` steps of ``total`` (throttled, always drawn at the end)."""
        now = time.monotonic()
        if not self.enabled or (now - self._last < MIN_INTERVAL and done < self.total):
            return
        self._last = now
        filled = WIDTH * min(done, self.total) // self.total
        bar = "#" * filled + "." * (WIDTH - filled)
        self.stream.write(f"\r[{bar}] {done}/{self.total} steps, loss {loss:.4f}")
        self.stream.flush()
        self._shown = True

    def clear(self) -> None:
        """Erase the bar so a line can be printed in its place."""
        if self._shown:
            self.stream.write("\r" + " " * (WIDTH + 50) + "\r")
            self.stream.flush()
            self._shown = False


def progress_enabled(mode: str, rank: int, stream: TextIO | None = None) -> bool:
    """On rank 0 only: 'on', or 'auto' when stderr is a terminal."""
    stream = stream or sys.stderr
    return rank == 0 and (mode == "on" or (mode == "auto" and stream.isatty()))
