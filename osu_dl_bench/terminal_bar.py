"""The suite's one progress bar (tqdm): fixed width, ASCII, redrawn in place at most every
MIN_INTERVAL seconds; the sweep's points (jobs.progress) and the trainer's steps
(train.progress) each give it their own style."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from tqdm import tqdm

# A bar of fixed width, so the terminal's size plays no part: tqdm would trim the line to
# the width and hide it past the height, and a terminal that reports 0 x 0 hides it.
SCREEN = {"ncols": 120, "nrows": 20}
# Seconds between redraws on a terminal.
MIN_INTERVAL = 0.2


@dataclass(frozen=True)
class BarStyle:
    """What a bar shows: tqdm's ``bar_format`` and its ``ascii`` characters (empty, full)."""

    bar_format: str
    chars: str


def render_line(style: BarStyle, done: int, total: int, elapsed: float) -> str:
    """The bar as one line of text, for a stream that is not a terminal."""
    rate = done / elapsed if done and elapsed > 0 else None
    return tqdm.format_meter(
        done, total, elapsed, bar_format=style.bar_format, ascii=style.chars, rate=rate
    )


class TerminalBar:
    """One tqdm bar on ``stream``, opened by ``open`` or on the first ``update``; with
    ``leave`` its final state stays on the screen when closed, else it is erased."""

    def __init__(self, total: int, stream: TextIO, style: BarStyle, leave: bool) -> None:
        self.total, self.stream, self.style, self.leave = total, stream, style, leave
        self._tqdm: tqdm | None = None

    @property
    def done(self) -> int:
        """Units shown as done (0 before the bar is opened)."""
        return self._tqdm.n if self._tqdm is not None else 0

    @property
    def is_open(self) -> bool:
        """Whether the bar is on the screen (opened and not closed)."""
        return self._tqdm is not None

    def open(self) -> None:
        """Draw the bar now (a bar made and never drawn would print when Python exits)."""
        if self._tqdm is None:
            self._tqdm = tqdm(
                total=self.total,
                file=self.stream,
                bar_format=self.style.bar_format,
                ascii=self.style.chars,
                mininterval=MIN_INTERVAL,
                **SCREEN,
                leave=self.leave,
            )

    def update(self, done: int, total: int | None = None, postfix: str | None = None) -> None:
        """Show ``done`` (and a new ``total``, a new ``postfix``), redrawn when due."""
        self.open()
        if total is not None:
            self.total = self._tqdm.total = total
        if postfix is not None:
            self._tqdm.set_postfix_str(postfix, refresh=False)
        self._tqdm.update(done - self._tqdm.n)

    def refresh(self, total: int | None = None) -> None:
        """Redraw now (with a new ``total``), if the bar is open."""
        if self._tqdm is not None:
            if total is not None:
                self.total = self._tqdm.total = total
            self._tqdm.refresh()

    def clear(self) -> None:
        """Erase the bar so a line can be printed in its place; a finished bar that
        leaves nothing behind is closed for good."""
        if self._tqdm is None:
            return
        if not self.leave and self._tqdm.n >= self.total:
            self.close()
        else:
            self._tqdm.clear()

    def close(self) -> None:
        """Close the bar: its final state stays on its own line with ``leave``."""
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None
