"""A rank's heartbeat file: what the rank's stores record, what a reader makes of it, a reader
that survives any file, and the kernel's two stores around each call (COMM_SELF)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from mpi4py import MPI

from collectives import SPECS
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from osu_dl_bench.measurement import heartbeat, kernel
from osu_dl_bench.measurement.heartbeat import Heartbeat, file_name, read


@pytest.fixture
def files(tmp_path):
    """A job folder of three ranks' files, as the launcher makes it."""
    heartbeat.create_files(tmp_path / "job", 3)
    return tmp_path / "job"


def _calls(beat: Heartbeat, count: int, order: list[int], repeats: int, interleaved: bool):
    """``count`` calls of a step, completed; returns the marks and the last position."""
    marks, at = beat.step(order, repeats, interleaved)
    for _ in range(count):
        marks[0] = at = at + 1
        marks[1] = at
    return marks, at


def test_a_file_the_rank_never_opened_says_so(files):
    beat = read(files / file_name(2), 2)
    assert beat.problem == "the rank never opened its heartbeat file"


def test_the_rank_who_it_is_and_where_it_is_among_the_calls(files):
    beat = Heartbeat(files / file_name(1), 1)
    beat.point("allreduce", 1 << 20, ["native", "ring", "rd"])
    beat.phase("round", 2)
    marks, at = _calls(beat, 7, [2, 0, 1], 5, interleaved=False)
    marks[0] = at + 1  # entered the 8th call, not returned

    seen = read(files / file_name(1), 1)
    assert seen.problem is None and seen.pid > 0 and seen.host and seen.rank == 1
    assert (seen.phase, seen.round_number, seen.point) == ("round", 2, ("allreduce", 1 << 20))
    assert seen.entered == seen.completed + 1
    # blocked: candidate 2 (rd) five times, then candidate 0 (native)
    done, now = seen.completed_call, seen.entered_call
    assert (done.candidate, done.iteration, done.iterations) == ("native", 1, 5)
    assert (now.candidate, now.iteration) == ("native", 2)
    assert (now.collective, now.size_bytes, now.phase, now.round_number) == (
        "allreduce",
        1 << 20,
        "round",
        2,
    )


def test_interleaved_steps_call_one_of_each_candidate_per_iteration(files):
    beat = Heartbeat(files / file_name(0), 0)
    beat.point("bcast", 64, ["native", "binomial"])
    beat.phase("iterations")
    _calls(beat, 3, [1, 0], 4, interleaved=True)
    done = read(files / file_name(0), 0).completed_call
    assert (done.candidate, done.iteration, done.phase) == ("binomial", 1, "iterations")


def test_positions_grow_across_steps_and_points_so_ranks_compare(files):
    beat = Heartbeat(files / file_name(0), 0)
    beat.point("bcast", 64, ["native"])
    _, first = _calls(beat, 50, [0], 50, interleaved=False)
    beat.point("bcast", 128, ["native"])
    _, second = _calls(beat, 1, [0], 1, interleaved=False)
    assert second > first
    done = read(files / file_name(0), 0).completed_call
    assert (done.size_bytes, done.iteration) == (128, 0)


def test_a_call_whose_step_left_the_ring_is_unknown_not_wrong(files):
    beat = Heartbeat(files / file_name(0), 0)
    beat.point("bcast", 64, ["native"])
    marks, old = _calls(beat, 1, [0], 1, interleaved=False)
    for _ in range(heartbeat.RING):
        _calls(beat, 1, [0], 1, interleaved=False)
    marks[1] = old  # a position from RING steps ago
    assert read(files / file_name(0), 0).completed_call is None


def test_labels_and_orders_beyond_the_file_are_named_by_number(files):
    beat = Heartbeat(files / file_name(0), 0)
    many = [f"candidate-{k}" for k in range(heartbeat.MAX_ORDER + 10)]
    beat.point("allreduce", 8, many)
    _calls(beat, heartbeat.MAX_ORDER + 5, list(range(len(many))), 1, interleaved=False)
    assert read(files / file_name(0), 0).completed_call.candidate == f"#{heartbeat.MAX_ORDER + 4}"


def test_the_tick_moves_and_progress_follows_completed_calls(files):
    beat = Heartbeat(files / file_name(0), 0)
    beat.tick()
    before = read(files / file_name(0), 0)
    time.sleep(0.01)
    beat.tick()  # nothing completed since: progress stays
    after = read(files / file_name(0), 0)
    assert after.tick > before.tick and after.progress == before.progress
    _calls(beat, 1, [0], 1, interleaved=False)
    beat.tick()
    assert read(files / file_name(0), 0).progress > before.progress


@pytest.mark.parametrize(
    "damage,problem",
    [
        (lambda path: path.unlink(), "no heartbeat file"),
        (lambda path: path.write_bytes(path.read_bytes()[:100]), "cut short (100 of"),
        (lambda path: path.write_bytes(b""), "cut short (0 of"),
        (lambda path: path.write_bytes(b"x" * heartbeat.FILE_BYTES), "not a heartbeat file"),
        (lambda path: path.mkdir() if not path.unlink() else None, "unreadable"),
    ],
)
def test_missing_cut_or_foreign_files_are_named_never_raised(files, damage, problem):
    path = files / file_name(1)
    damage(path)
    beat = read(path, 1)
    assert problem in beat.problem and beat.rank == 1


def test_any_bytes_after_the_magic_read_without_an_exception(files):
    rng = np.random.default_rng(27)
    path = files / file_name(0)
    magic = np.array([heartbeat.MAGIC], "i8").tobytes()
    for _ in range(300):
        path.write_bytes(magic + rng.bytes(heartbeat.FILE_BYTES - len(magic)))
        read(path, 0)  # whatever it says, it says it without raising
    # and a step whose numbers are nonsense
    beat = Heartbeat(path, 0)
    marks, at = beat.step([0], 0, interleaved=False)
    marks[0] = marks[1] = at + 5
    assert read(path, 0).completed_call.iteration is None


def test_a_folder_that_cannot_be_made_raises_oserror_for_the_launcher(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        heartbeat.create_files(tmp_path / "file" / "job", 2)


def test_a_rank_whose_file_cannot_be_opened_runs_without_one(tmp_path, monkeypatch):
    monkeypatch.setattr(heartbeat, "_current", heartbeat.NoHeartbeat())
    monkeypatch.setenv(heartbeat.DIRECTORY_ENV, str(tmp_path / "missing"))
    warning = heartbeat.start_from_environment(3)
    assert "rank 3 keeps no heartbeat" in warning and "missing/rank-3" in warning
    assert isinstance(heartbeat.current(), heartbeat.NoHeartbeat)
    monkeypatch.delenv(heartbeat.DIRECTORY_ENV)
    assert heartbeat.start_from_environment(3) is None


def test_the_kernel_stores_entered_before_each_call_and_completed_after_it(files, monkeypatch):
    beat = Heartbeat(files / file_name(0), 0)
    monkeypatch.setattr(heartbeat, "_current", beat)
    etype, op = element_type("float32"), reduce_op("sum")
    inputs = kernel.prepare_inputs(MPI.COMM_SELF, SPECS["allreduce"], etype, op, np, 8)
    beat.point("allreduce", 32, ["first", "second"])
    seen = []

    def look(send, recv, op, root) -> None:
        """A correct allreduce that reads its own heartbeat while in the call."""
        recv[...] = send
        seen.append(read(files / file_name(0), 0))

    timing = kernel.measure_budget(MPI.COMM_SELF, [look, look], inputs, budget=0.01)
    checks, rounds = seen[:2], seen[-timing.schedule.iterations * 2 :]
    # inside every call: entered, not completed (the call before it is)
    assert all(s.entered > s.completed and s.entered_call for s in seen)
    assert checks[0].completed_call is None  # no call before the first
    assert checks[1].completed_call.candidate == "first"
    assert [(s.entered_call.phase, s.entered_call.candidate) for s in checks] == [
        ("check", "first"),
        ("check", "second"),
    ]
    last = rounds[-1].entered_call
    assert (last.phase, last.round_number) == ("round", timing.schedule.rounds)
    assert last.iteration == timing.schedule.iterations - 1
    after = read(files / file_name(0), 0)
    assert after.entered == after.completed and after.phase == "exchange"


def test_a_link_planted_at_a_rank_file_is_replaced_not_written_through(tmp_path):
    results = tmp_path / "results.csv"
    results.write_text("measured rows\n")
    job = tmp_path / "heartbeats" / "p2-2-mpi"
    job.mkdir(parents=True)
    (job / file_name(0)).symlink_to(results)
    heartbeat.create_files(job, 2)
    assert results.read_text() == "measured rows\n"
    assert not (job / file_name(0)).is_symlink()
    assert (job / file_name(0)).stat().st_size == heartbeat.FILE_BYTES


def test_a_fifo_at_a_rank_file_never_blocks_the_launcher(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    os.mkfifo(job / file_name(0))
    # Before: open(O_WRONLY) of the FIFO waited for a reader that never came.
    heartbeat.create_files(job, 1)
    assert (job / file_name(0)).stat().st_size == heartbeat.FILE_BYTES


@pytest.mark.parametrize("which", ["job", "heartbeats"])
def test_a_linked_folder_is_refused_not_followed(tmp_path, which):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / file_name(0)).write_text("theirs")
    root = tmp_path / "run" / "heartbeats"
    if which == "job":
        root.mkdir(parents=True)
        (root / "p1-1-mpi").symlink_to(elsewhere)
    else:
        root.parent.mkdir()
        root.symlink_to(elsewhere)
        (elsewhere / "p1-1-mpi").symlink_to(elsewhere)
    with pytest.raises(OSError, match="a symbolic link, not followed"):
        heartbeat.create_files(root / "p1-1-mpi", 1)
    assert (elsewhere / file_name(0)).read_text() == "theirs"


def test_reading_a_fifo_or_a_link_names_it_and_never_blocks(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "target").write_bytes(bytes(heartbeat.FILE_BYTES))
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert "unreadable (not a regular file)" in read(tmp_path / "fifo", 0).problem
    assert "unreadable" in read(tmp_path / "link", 0).problem
    with pytest.raises(OSError):
        Heartbeat(tmp_path / "fifo", 0)
