"""What the ranks of a stalled job were doing, from their heartbeats (measurement.heartbeat),
read without MPI by the process that launched the job: each rank's last completed call
and the call it is in, the ranks that never arrived at the call the others are in, the
ranks whose liveness tick stands still (stopped, or frozen) and the ranks that never
started. No MPI here.

The files are read twice, SAMPLE_GAP apart: a rank whose tick moved in between is alive,
whatever the clocks of the hosts say; how long a silent rank has been silent is this
host's clock against its last tick. Where a rank runs on this host, its process is looked
up too (stopped, or ended).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from osu_dl_bench.jobs.links import NodeAnswer, probe_nodes
from osu_dl_bench.measurement.heartbeat import TICK_SECONDS, Beat, Call, file_name, read

# Seconds between the two reads: a live rank ticks at least twice in between.
SAMPLE_GAP = 2.5 * TICK_SECONDS


@dataclass(frozen=True)
class RankState:
    """One rank as its heartbeat shows it."""

    rank: int
    host: str
    pid: int
    problem: str | None  # why it shows nothing (no file, never opened, damaged)
    last_completed: str | None  # None: no call completed yet
    now: str  # 'in CALL' or the phase it is in between calls
    responding: bool
    silent_s: float | None  # seconds since its last tick, when it does not respond
    process: str | None  # 'stopped' or 'ended', for a process on this host


@dataclass(frozen=True)
class StallReport:
    """The ranks of a stalled job, and those among them that hold the others up."""

    directory: str
    ranks: tuple[RankState, ...]
    waiting_in: str | None  # the call the ranks furthest ahead are in
    never_arrived: tuple[int, ...]
    not_responding: tuple[int, ...]
    no_heartbeat: tuple[int, ...]
    # The job's nodes asked over the network (check_links) and those that did not answer,
    # each with why: empty where the job ran on one node or a rank was already to blame.
    nodes_asked: tuple[str, ...] = ()
    nodes_silent: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The report, one line per rank, then the ranks that hold the others up."""
        lines = [_rank_line(state) for state in self.ranks]
        if self.never_arrived:
            lines.append(f"never arrived at {self.waiting_in}: {_ranks(self.never_arrived)}")
        if self.not_responding:
            silent = ", ".join(
                f"{s.rank} ({_seconds(s.silent_s)})" for s in self._states(self.not_responding)
            )
            lines.append(
                f"not responding (liveness tick standing still: stopped, or frozen): "
                f"{_plural('rank', self.not_responding)} {silent}"
            )
        if self.no_heartbeat:
            lines.append(f"no heartbeat: {_ranks(self.no_heartbeat)}")
        if not (self.never_arrived or self.not_responding or self.no_heartbeat):
            lines.append(self._all_alive())
        return lines

    def summary(self) -> str:
        """Who holds the job up, in a few words."""
        found = []
        if self.not_responding:
            found.append(f"{_ranks(self.not_responding)} stopped responding")
        arrived_late = [r for r in self.never_arrived if r not in self.not_responding]
        if arrived_late:
            found.append(f"{_ranks(arrived_late)} never arrived at {self.waiting_in}")
        if self.no_heartbeat:
            found.append(f"{_ranks(self.no_heartbeat)} showed no heartbeat")
        return "; ".join(found) or self._all_alive()

    def record(self) -> dict[str, Any]:
        """The report as the run directory's metadata keeps it."""
        return {
            "heartbeats": self.directory,
            "ranks": [asdict(state) for state in self.ranks],
            "waiting_in": self.waiting_in,
            "never_arrived": list(self.never_arrived),
            "not_responding": list(self.not_responding),
            "no_heartbeat": list(self.no_heartbeat),
            "nodes_asked": list(self.nodes_asked),
            "nodes_silent": list(self.nodes_silent),
            "report": self.lines(),
        }

    def _states(self, ranks: Sequence[int]) -> list[RankState]:
        return [state for state in self.ranks if state.rank in ranks]

    def _all_alive(self) -> str:
        where = f"is in {self.waiting_in}" if self.waiting_in else "none is in a timed call"
        if self.nodes_silent:
            return (
                f"every rank responds and {where}, but {'; '.join(self.nodes_silent)}: "
                "a network fault between the job's nodes, not its algorithm (rerun with "
                "--resume once the link is back)"
            )
        answered = (
            f"; {', '.join(self.nodes_asked)} answer over the network" if self.nodes_asked else ""
        )
        if self.waiting_in:
            return (
                f"every rank responds and is in {self.waiting_in}, which does not return "
                f"(a hung algorithm? leave it out with -a){answered}"
            )
        return f"every rank responds, none is behind and none is in a timed call{answered}"


def check_links(
    report: StallReport, probe: Callable[[Sequence[str]], list[NodeAnswer]] = probe_nodes
) -> StallReport:
    """``report`` with the answers of its job's nodes (links.probe_nodes) where no rank is
    to blame and the ranks run on more than one node: a link that is down leaves every
    rank alive in the same call, which would otherwise read as a hung algorithm."""
    if report.never_arrived or report.not_responding or report.no_heartbeat:
        return report
    nodes = list(dict.fromkeys(state.host for state in report.ranks if state.host))
    if len(nodes) < 2:
        return report
    answers = probe(nodes)
    silent = tuple(f"{a.text()} does not answer ({a.problem})" for a in answers if a.problem)
    return replace(report, nodes_asked=tuple(a.text() for a in answers), nodes_silent=silent)


def sample(
    directory: Path,
    nprocs: int,
    gap: float = SAMPLE_GAP,
    sleep: Callable[[float], object] = time.sleep,
) -> StallReport:
    """Read the job's heartbeats twice, ``gap`` seconds apart, and report."""
    paths = [directory / file_name(rank) for rank in range(nprocs)]
    first = [read(path, rank) for rank, path in enumerate(paths)]
    sleep(gap)
    second = [read(path, rank) for rank, path in enumerate(paths)]
    return build(str(directory), first, second, time.time(), socket.gethostname())


def build(
    directory: str,
    first: Sequence[Beat],
    second: Sequence[Beat],
    now: float,
    this_host: str,
    process_state: Callable[[int], str | None] | None = None,
) -> StallReport:
    """The report from two reads of every rank's heartbeat (``now``: this host's time of
    the second; ``process_state(pid)`` looks up a process on ``this_host``)."""
    look_up = process_state or local_process_state
    started = [beat for beat in second if beat.problem is None]
    furthest = max((beat.entered for beat in started), default=0)
    ahead = [beat for beat in started if beat.entered == furthest and furthest]
    in_call = [beat for beat in ahead if beat.completed < beat.entered]
    waiting_in = _call_text(in_call[0].entered_call) if in_call else None
    states, not_responding = [], []
    for before, beat in zip(first, second, strict=True):
        if beat.problem is not None:
            states.append(RankState(beat.rank, "", 0, beat.problem, None, "", False, None, None))
            continue
        responding = before.problem is not None or beat.tick != before.tick
        process = look_up(beat.pid) if beat.host == this_host and beat.pid > 0 else None
        silent = None if responding else max(0.0, now - beat.tick)
        if not responding:
            not_responding.append(beat.rank)
        states.append(
            RankState(
                rank=beat.rank,
                host=beat.host,
                pid=beat.pid,
                problem=None,
                last_completed=_call_text(beat.completed_call) if beat.completed else None,
                now=_now_text(beat),
                responding=responding,
                silent_s=None if silent is None else round(silent, 1),
                process=process if process in ("stopped", "ended") else None,
            )
        )
    never_arrived = [b.rank for b in started if in_call and b.entered < furthest]
    return StallReport(
        directory=directory,
        ranks=tuple(states),
        waiting_in=waiting_in,
        never_arrived=tuple(never_arrived),
        not_responding=tuple(not_responding),
        no_heartbeat=tuple(beat.rank for beat in second if beat.problem is not None),
    )


def local_process_state(pid: int) -> str | None:
    """'stopped', 'ended' or 'running' for a process of this host (Linux's /proc); None
    where it cannot be told."""
    if not Path("/proc/self/stat").exists():
        return None
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "ended"
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    state = fields[0] if fields else ""
    return {"T": "stopped", "t": "stopped", "Z": "ended", "X": "ended"}.get(state, "running")


# --- the words ------------------------------------------------------------------------------


def size_text(nbytes: int) -> str:
    """'64 B', '64 KiB', '1 MiB'."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit} {name}"
    return f"{nbytes} B"


def _call_text(call: Call | None) -> str:
    """'allreduce 1 MiB, candidate ring, round 2, iteration 17 of 40'."""
    if call is None:
        return "a call whose step is no longer recorded"
    parts = []
    if call.collective is not None and call.size_bytes is not None:
        parts.append(f"{call.collective} {size_text(call.size_bytes)}")
    if call.candidate is not None:
        parts.append(f"candidate {call.candidate}")
    parts.append(_phase_text(call.phase, call.round_number))
    if call.iteration is not None and call.iterations and call.iterations > 1:
        parts.append(f"iteration {call.iteration + 1} of {call.iterations}")
    return ", ".join(parts)


def _phase_text(phase: str, round_number: int) -> str:
    if phase == "round":
        return f"round {round_number}"
    return {"iterations": "iteration-count pass", "check": "result check"}.get(phase, phase)


def _now_text(beat: Beat) -> str:
    """Where the rank is: in a call, or the phase it is in between calls."""
    if beat.completed < beat.entered:
        return f"in {_call_text(beat.entered_call)}"
    point = f" of {beat.point[0]} {size_text(beat.point[1])}" if beat.point else ""
    if beat.phase == "round":
        return f"in round {beat.round_number}{point}, between timed calls"
    if beat.phase in ("check", "iterations", "exchange"):
        return f"in the {_phase_text(beat.phase, 0)}{point}, between calls"
    return f"in {beat.phase}"


def _rank_line(state: RankState) -> str:
    if state.problem is not None:
        return f"rank {state.rank}: {state.problem}: {_problem_meaning(state.problem)}"
    done = state.last_completed or "no call completed yet"
    line = f"rank {state.rank} ({state.host}, pid {state.pid}): last completed {done}; "
    line += f"now {state.now}"
    if not state.responding:
        line += f"; stopped responding {_seconds(state.silent_s)} ago"
    if state.process == "stopped":
        line += " (its process is stopped)"
    elif state.process == "ended":
        line += " (its process has ended)"
    return line


def _problem_meaning(problem: str) -> str:
    if problem in ("no heartbeat file", "the rank never opened its heartbeat file"):
        return "it did not start (or could not open its file)"
    return "its steps are unknown"


def _ranks(ranks: Sequence[int]) -> str:
    return f"{_plural('rank', ranks)} {', '.join(map(str, ranks))}"


def _plural(word: str, items: Sequence[object]) -> str:
    return word if len(items) == 1 else f"{word}s"


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} s"
