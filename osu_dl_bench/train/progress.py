"""Rank 0's progress bar on stderr: the suite's one bar (terminal_bar) with steps and loss."""

from __future__ import annotations

import sys
from typing import TextIO

from osu_dl_bench.terminal_bar import BarStyle, TerminalBar

# '[#####.....] 40/100 steps, loss 0.532' (tqdm puts ', ' before the postfix).
STEPS = BarStyle("[{bar:30}] {n}/{total} steps{postfix}", ".#")


class ProgressBar:
    """``[#####.....] 40/100 steps, loss 0.532`` rewritten in place, erased when done."""

    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.total, self.enabled = max(total, 1), enabled
        # Opened on the first update: a bar made and never drawn would print on exit.
        self._bar = TerminalBar(self.total, stream or sys.stderr, STEPS, leave=False)

    def update(self, done: int, loss: float) -> None:
        """Show ``done`` steps of ``total`` (throttled, always drawn at the end)."""
        if not self.enabled:
            return
        self._bar.update(min(done, self.total), postfix=f"loss {loss:.4f}")
        if done >= self.total:
            self._bar.refresh()

    def clear(self) -> None:
        """Erase the bar so a line can be printed in its place (for good once finished)."""
        self._bar.clear()


def progress_enabled(mode: str, rank: int, stream: TextIO | None = None) -> bool:
    """On rank 0 only: 'on', or 'auto' when stderr is a terminal."""
    stream = stream or sys.stderr
    return rank == 0 and (mode == "on" or (mode == "auto" and stream.isatty()))
