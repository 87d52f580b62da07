"""Rank 0's progress bar on stderr (tqdm, redrawn in place at most a few times a second)."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

from osu_dl_bench.jobs.progress import terminal_bar

WIDTH = 30
# '[#####.....] 40/100 steps, loss 0.532' (tqdm puts ', ' before the postfix).
BAR_FORMAT = f"[{{bar:{WIDTH}}}] {{n}}/{{total}} steps{{postfix}}"
BAR_CHARS = ".#"  # tqdm's ascii: empty, full


class ProgressBar:
    """``[#####.....] 40/100 steps, loss 0.532`` rewritten in place by tqdm."""

    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.total, self.enabled = max(total, 1), enabled
        self.stream = stream or sys.stderr
        self._bar: tqdm | None = None

    def _open(self) -> tqdm:
        # Opened on the first update: a bar made and never drawn would print on exit.
        return terminal_bar(self.total, self.stream, BAR_FORMAT, BAR_CHARS, leave=False)

    def update(self, done: int, loss: float) -> None:
        """Show ``done`` steps of ``total`` (throttled, always drawn at the end)."""
        if not self.enabled:
            return
        if self._bar is None:
            self._bar = self._open()
        self._bar.set_postfix_str(f"loss {loss:.4f}", refresh=False)
        self._bar.update(min(done, self.total) - self._bar.n)
        if done >= self.total:
            self._bar.refresh()

    def clear(self) -> None:
        """Erase the bar so a line can be printed in its place."""
        if self._bar is None:
            return
        if self._bar.n >= self.total:
            self._bar.close()  # finished: leave=False erases it for good
            self._bar = None
        else:
            self._bar.clear()


def progress_enabled(mode: str, rank: int, stream: TextIO | None = None) -> bool:
    """On rank 0 only: 'on', or 'auto' when stderr is a terminal."""
    stream = stream or sys.stderr
    return rank == 0 and (mode == "on" or (mode == "auto" and stream.isatty()))
