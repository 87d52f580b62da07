"""What a sweep shows: the event lines a job's rank 0 prints for the orchestrator, the
orchestrator's progress bar (tqdm: points done / total, elapsed, ETA) and the text lines
of plans and points. No MPI here.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any, TextIO

from collectives.units import format_size
from osu_dl_bench.measurement.store import SweepPoint
from osu_dl_bench.terminal_bar import BarStyle, TerminalBar, render_line

# Event lines start with this marker; every other line of a job is passed through.
EVENT_PREFIX = "@osu-dl-bench-sweep "


def encode_event(kind: str, **fields: Any) -> str:
    """One event as a line: the marker, then JSON."""
    return EVENT_PREFIX + json.dumps({"event": kind, **fields}, separators=(",", ":"))


def decode_event(line: str) -> dict[str, Any] | None:
    """The event carried by a line, or None for an ordinary line."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(EVENT_PREFIX) :])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) and "event" in event else None


def format_duration(seconds: float) -> str:
    """'0:42', '12:05' or '2:03:00'."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


# The bar and what it shows: points done / total, time elapsed, time left at the pace so far.
POINTS = BarStyle("[{bar:24}] {n:>4}/{total} points  {elapsed} elapsed  ETA {remaining}", "-#")


class Progress:
    """Points done out of a total that jobs refine as they report their own plans.

    On a terminal tqdm redraws one line; otherwise (logs, CI) it writes a line at most
    every ``interval`` seconds, and always the last one.
    """

    def __init__(
        self,
        todo: dict[Hashable, int],
        stream: TextIO = sys.stderr,
        interactive: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 10.0,
    ) -> None:
        self.todo = dict(todo)  # job (process count, launch, group) -> points to measure
        self.done = 0
        self.stream = stream
        self.interactive = stream.isatty() if interactive is None else interactive
        self.clock = clock
        self.start = clock()
        self.interval = interval
        self._last_shown: float | None = None
        self._shown_state: tuple[int, int] | None = None
        self._bar: TerminalBar | None = None
        if self.interactive:
            self._bar = TerminalBar(self.total, stream, POINTS, leave=True)
            self._bar.open()

    @property
    def total(self) -> int:
        """Points this session measures (its estimate, until every job has reported)."""
        return max(self.done, sum(self.todo.values()))

    def replan(self, job: Hashable, todo: int) -> None:
        """A job's own count of its points replaces the planner's estimate."""
        self.todo[job] = todo
        if self._bar is not None:
            self._bar.refresh(self.total)

    def advance(self) -> None:
        """One more point measured."""
        self.done += 1
        if self._bar is not None:
            self._bar.update(self.done, self.total)
        else:
            self.show()

    def eta_seconds(self) -> float | None:
        """Remaining time at the average pace so far (points share one budget each)."""
        if not self.done:
            return None
        return (self.clock() - self.start) / self.done * (self.total - self.done)

    def render(self) -> str:
        """'[######------]   12/88 points  00:45 elapsed  ETA 02:13'."""
        return render_line(POINTS, self.done, self.total, self.clock() - self.start)

    def show(self, force: bool = False) -> None:
        """Draw the bar (rate-limited when not on a terminal)."""
        if self._bar is not None:
            self._bar.refresh()
            return
        now = self.clock()
        if (
            force
            or self._last_shown is None
            or now - self._last_shown >= self.interval
            or self.done == self.total
        ):
            self.stream.write(self.render() + "\n")
            self.stream.flush()
            self._last_shown, self._shown_state = now, (self.done, self.total)

    def clear(self) -> None:
        """Erase the bar so an ordinary line can be printed (terminal only)."""
        if self._bar is not None:
            self._bar.clear()

    def close(self) -> None:
        """Leave the final state on its own line."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._shown_state != (self.done, self.total):
            self.show(force=True)


def point_line(points: list[SweepPoint], seconds: float) -> str:
    """'p=2 allreduce 8B: 3 candidates, 40x1000, best native 3.21 us (spread 0.10), 2.1 s'."""
    first = points[0]
    best = min(points, key=lambda pt: pt.median_us)
    return (
        f"p={first.nprocs} {first.collective} {format_size(first.size_bytes)}B: "
        f"{len(points)} candidates, {first.rounds}x{first.iterations}, best {best.algorithm} "
        f"{best.median_us:.2f} us (spread {best.spread_us:.2f}), {seconds:.1f} s"
    )


def skipped_lines(nprocs: int, skipped: list[dict[str, str]]) -> list[str]:
    """One line per skipped algorithm (its grid variants share the reason)."""
    grouped: dict[tuple[str, str, str], int] = {}
    for item in skipped:
        label = item["algorithm"]
        # a library candidate keeps its name; grid variants of one algorithm share a line
        name = label if label.startswith("native:alg=") else label.partition(":")[0]
        key = (item["collective"], name, item["reason"])
        grouped[key] = grouped.get(key, 0) + 1
    return [
        f"# p={nprocs} {coll} {name}{f' ({k} variants)' if k > 1 else ''}: skipped: {reason}"
        for (coll, name, reason), k in grouped.items()
    ]


def plan_line(plan: dict[str, Any]) -> str:
    """'# p=4 launch 2 (gloo): 40 of 44 points to measure' (a job's plan event)."""
    return (
        f"# p={plan['nprocs']} launch {plan['launch']} ({plan['group']}): {plan['todo']} of "
        f"{plan['points']} points to measure"
    )


def plan_lines(plans: list[dict[str, Any]]) -> list[str]:
    """The dry run's text: points per process count, skipped algorithms, the total."""
    lines = []
    for plan in plans:
        lines.append(plan_line(plan))
        if plan["launch"] == 1:
            lines += skipped_lines(plan["nprocs"], plan["skipped"])
    lines.append(f"# total: {sum(p['todo'] for p in plans)} points to measure")
    return lines
