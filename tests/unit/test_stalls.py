"""The stall report from heartbeat files (no MPI): who never arrived, who stopped responding,
who never started, and a report that any file leaves standing; then the orchestrator's
side: the report printed before the job is stopped, and kept in the run directory."""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from osu_dl_bench.commands.sweep_cli import add_arguments, config_from_args
from osu_dl_bench.jobs import orchestrate, stalls
from osu_dl_bench.jobs.progress import Progress, encode_event
from osu_dl_bench.measurement import heartbeat
from osu_dl_bench.measurement.heartbeat import Heartbeat, file_name, read
from osu_dl_bench.measurement.store import RunStore

LABELS = ["native", "ring"]


class Job:
    """Heartbeat files of ``nprocs`` ranks that have reached the same point and phase."""

    def __init__(self, folder, nprocs: int, opened: int | None = None) -> None:
        self.folder = folder
        heartbeat.create_files(folder, nprocs)
        self.beats = [Heartbeat(folder / file_name(r), r) for r in range(opened or nprocs)]
        for beat in self.beats:
            beat.point("allreduce", 1 << 20, LABELS)
            beat.phase("round", 2)
            beat.tick()
        self.marks = [beat.step([1, 0], 20, interleaved=False) for beat in self.beats]

    def run(self, rank: int, completed: int, entered: bool) -> None:
        """Rank ``rank`` completed ``completed`` calls of the step and entered the next."""
        marks, at = self.marks[rank]
        marks[1] = at + completed
        marks[0] = at + completed + entered

    def read(self, nprocs: int):
        return [read(self.folder / file_name(r), r) for r in range(nprocs)]

    def report(self, nprocs: int, stopped: tuple[int, ...] = (), **kwargs):
        """Two reads, the ranks not in ``stopped`` ticking in between."""
        first = self.read(nprocs)
        time.sleep(0.01)
        for beat in self.beats:
            if beat._record["rank"] not in stopped:
                beat.tick()
        second = self.read(nprocs)
        now = max(b.tick for b in second if b.problem is None) + 30
        return stalls.build(str(self.folder), first, second, now, "elsewhere", **kwargs)


def test_a_rank_that_stopped_before_the_call_the_others_wait_in_is_named(tmp_path):
    job = Job(tmp_path, 3)
    job.run(0, 37, entered=True)
    job.run(1, 36, entered=False)  # stopped between its 36th call and the 37th
    job.run(2, 37, entered=True)
    report = job.report(3, stopped=(1,))
    assert report.never_arrived == (1,) and report.not_responding == (1,)
    assert report.waiting_in == "allreduce 1 MiB, candidate native, round 2, iteration 18 of 20"
    lines = report.lines()
    assert lines[1].startswith("rank 1 (") and ", pid " in lines[1]
    assert (
        "last completed allreduce 1 MiB, candidate native, round 2, iteration 16 of 20; "
        "now in round 2 of allreduce 1 MiB, between timed calls; "
        "stopped responding 30 s ago" in lines[1]
    )
    assert "never arrived at allreduce 1 MiB, candidate native, round 2, iteration 18" in lines[3]
    assert lines[4].startswith("not responding") and lines[4].endswith("rank 1 (30 s)")
    assert report.summary() == "rank 1 stopped responding"


def test_a_rank_stopped_inside_the_call_is_named_by_its_tick_alone(tmp_path):
    job = Job(tmp_path, 4)
    for rank in range(4):
        job.run(rank, 3, entered=True)
    report = job.report(4, stopped=(2,), process_state=lambda pid: "stopped")
    assert report.never_arrived == () and report.not_responding == (2,)
    assert "now in allreduce 1 MiB, candidate ring, round 2, iteration 4 of 20" in report.lines()[2]
    assert report.ranks[2].process is None  # another host: its process is not looked up


def test_a_rank_between_calls_of_the_iteration_count_passes_is_said_to_be_there(tmp_path):
    job = Job(tmp_path, 2)
    for beat in job.beats:
        beat.phase("iterations")
    for rank in range(2):
        job.run(rank, 3, entered=False)
    lines = job.report(2, stopped=(0, 1)).lines()
    assert "now in the iteration-count pass of allreduce 1 MiB, between calls" in lines[0]


def test_a_stopped_process_on_this_host_is_said_to_be_stopped(tmp_path):
    job = Job(tmp_path, 2)
    first = job.read(2)
    host = first[0].host
    report = stalls.build("dir", first, first, first[0].tick + 5, host, lambda pid: "stopped")
    assert report.not_responding == (0, 1)
    assert report.lines()[0].endswith("stopped responding 5 s ago (its process is stopped)")
    assert report.summary() == "ranks 0, 1 stopped responding"


def test_ranks_without_a_heartbeat_are_named_and_the_others_still_reported(tmp_path):
    job = Job(tmp_path, 5, opened=2)  # ranks 2, 3, 4 never opened theirs
    (tmp_path / file_name(3)).write_bytes(b"short")
    (tmp_path / file_name(4)).unlink()
    for rank in range(2):
        job.run(rank, 0, entered=True)
    report = job.report(6)  # rank 5: not even a file
    assert report.no_heartbeat == (2, 3, 4, 5)
    lines = report.lines()
    assert lines[2] == (
        "rank 2: the rank never opened its heartbeat file: it did not start (or could not "
        "open its file)"
    )
    assert lines[3].startswith("rank 3: heartbeat file cut short (5 of")
    assert lines[4] == "rank 4: no heartbeat file: it did not start (or could not open its file)"
    assert lines[-1] == "no heartbeat: ranks 2, 3, 4, 5"
    assert report.never_arrived == () and report.not_responding == ()
    json.dumps(report.record())  # the run directory can keep it


def test_every_rank_alive_in_the_same_call_points_at_the_call(tmp_path):
    job = Job(tmp_path, 3)
    for rank in range(3):
        job.run(rank, 20, entered=True)
    report = job.report(3)
    assert report.lines()[-1] == (
        "every rank responds and is in allreduce 1 MiB, candidate native, round 2, iteration 1 "
        "of 20, which does not return (a hung algorithm? leave it out with -a)"
    )
    assert "which does not return" in report.summary()


def test_sample_reads_twice_a_gap_apart(tmp_path):
    job = Job(tmp_path, 2)
    gaps = []

    def sleep(gap: float) -> None:
        gaps.append(gap)
        job.beats[0].tick()  # rank 0 lives, rank 1 does not

    time.sleep(0.01)
    report = stalls.sample(tmp_path, 2, sleep=sleep)
    assert gaps == [stalls.SAMPLE_GAP] and report.not_responding == (1,)


def test_the_process_state_of_a_local_rank():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert stalls.local_process_state(child.pid) == "running"
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while stalls.local_process_state(child.pid) != "stopped" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stalls.local_process_state(child.pid) == "stopped"
    finally:
        child.kill()
        child.wait()
    assert stalls.local_process_state(child.pid) == "ended"


@pytest.mark.parametrize("nbytes,text", [(8, "8 B"), (1000, "1000 B"), (65536, "64 KiB")])
def test_sizes_read_as_people_write_them(nbytes, text):
    assert stalls.size_text(nbytes) == text


# --- the orchestrator ---------------------------------------------------------------------

# A job of two ranks as the orchestrator sees one: rank 0 opens its heartbeat, says what
# it measures and goes silent while its liveness tick goes on; rank 1 never starts.
SILENT_JOB = (
    "import os, time\n"
    "from osu_dl_bench.measurement import heartbeat\n"
    "heartbeat.start(os.environ[heartbeat.DIRECTORY_ENV], 0)\n"
    f"print({encode_event('measuring', collective='bcast', size_bytes=64)!r}, flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_stalled_job_is_reported_from_its_heartbeats_before_it_is_stopped(tmp_path, capsys):
    folder = tmp_path / "beats"
    heartbeat.create_files(folder, 2)
    env = {**os.environ, heartbeat.DIRECTORY_ENV: str(folder)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SILENT_JOB], stdout=subprocess.PIPE, text=True, env=env
    )
    bar = Progress({(2, 1, "mpi"): 1}, stream=io.StringIO(), interactive=False)
    outcome = orchestrate.follow_job(proc, (2, 1, "mpi"), bar, 2.0, folder)
    assert proc.poll() is not None and outcome.stalled_at == "bcast 64 B"
    assert outcome.stall.no_heartbeat == (1,) and outcome.stall.not_responding == ()
    err = capsys.readouterr().err
    assert (
        "the job for --np 2 (launch 1, mpi) reported nothing for 2 s while measuring "
        "bcast 64 B; its ranks' heartbeats:\n  rank 0 (" in err
    )
    assert "now in start-up" in err and "  rank 1: the rank never opened" in err


def test_the_stall_is_kept_in_the_metadata_and_named_in_the_error(tmp_path, capsys):
    job = Job(tmp_path / "beats", 2)
    job.run(0, 5, entered=True)
    report = job.report(2, stopped=(1,))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = ["--np", "2", "-o", str(tmp_path / "run"), "--stall-timeout", "7"]
    cfg = config_from_args(parser.parse_args(args))
    RunStore(cfg.output).create()
    outcome = orchestrate.JobOutcome(1, False, 0, stalled_at="allreduce 1048576 B", stall=report)
    orchestrate._record_stall(cfg, (2, 1, "mpi"), outcome)
    orchestrate._explain_failure(cfg, (2, 1, "mpi"), outcome)
    (stall,) = RunStore(cfg.output).read_metadata()["stalls"]
    assert (stall["nprocs"], stall["launch"], stall["group"]) == (2, 1, "mpi")
    assert stall["not_responding"] == [1] and stall["never_arrived"] == [1]
    assert stall["ranks"][1]["last_completed"] is None and stall["report"] == report.lines()
    err = capsys.readouterr().err
    assert (
        "the job for --np 2 (launch 1, mpi) reported nothing for 7 s while measuring "
        "allreduce 1048576 B and was stopped: rank 1 stopped responding; the points "
        "measured so far are kept in" in err
    )


@pytest.mark.parametrize("text", ["1", "0.001", "2.9"])
def test_a_stall_timeout_under_three_heartbeats_is_refused_naming_the_floor(text, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--np", "2", "-o", "run", "--stall-timeout", text])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"expected at least 3 s (three heartbeat periods of a healthy job), got '{text}'" in err


def test_a_stall_timeout_of_three_heartbeats_is_accepted():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--np", "2", "-o", "run", "--stall-timeout", "3"])
    assert config_from_args(args).launching.stall_timeout == 3 * heartbeat.TICK_SECONDS


def _on_nodes(report, hosts):
    """``report`` with its ranks placed on ``hosts`` (one per rank)."""
    from dataclasses import replace

    ranks = tuple(replace(s, host=h) for s, h in zip(report.ranks, hosts, strict=True))
    return replace(report, ranks=ranks)


def _all_in_one_call(tmp_path, hosts):
    job = Job(tmp_path, len(hosts))
    for rank in range(len(hosts)):
        job.run(rank, 20, entered=True)
    return _on_nodes(job.report(len(hosts)), hosts)


def test_a_node_that_does_not_answer_is_named_instead_of_the_algorithm(tmp_path):
    from osu_dl_bench.jobs.links import NodeAnswer

    report = _all_in_one_call(tmp_path, ["node1", "node1", "node2"])
    asked = []

    def probe(nodes):
        asked.append(list(nodes))
        return [
            NodeAnswer("node1", "10.0.0.1", None),
            NodeAnswer("node2", "10.0.0.2", "no answer to a TCP connect within 2 s"),
        ]

    checked = stalls.check_links(report, probe)
    assert asked == [["node1", "node2"]]
    assert checked.nodes_silent == (
        "node2 (10.0.0.2) does not answer (no answer to a TCP connect within 2 s)",
    )
    assert "hung algorithm" not in checked.summary()
    assert "node2 (10.0.0.2) does not answer" in checked.lines()[-1]
    assert "a network fault between the job's nodes, not its algorithm" in checked.summary()
    assert checked.record()["nodes_silent"] == list(checked.nodes_silent)


def test_nodes_that_answer_leave_the_algorithm_as_the_suspect(tmp_path):
    from osu_dl_bench.jobs.links import NodeAnswer

    report = _all_in_one_call(tmp_path, ["node1", "node2"])
    checked = stalls.check_links(report, lambda nodes: [NodeAnswer(n, n, None) for n in nodes])
    assert "(a hung algorithm? leave it out with -a); node1, node2 answer" in checked.summary()


def test_one_node_or_a_rank_to_blame_asks_no_node(tmp_path):
    def probe(nodes):
        raise AssertionError("no node should be asked")

    one_node = _all_in_one_call(tmp_path / "a", ["node1", "node1"])
    assert stalls.check_links(one_node, probe) == one_node
    job = Job(tmp_path / "b", 2)
    job.run(0, 20, entered=True)
    job.run(1, 5, entered=True)
    behind = _on_nodes(job.report(2), ["node1", "node2"])
    assert stalls.check_links(behind, probe) == behind


def test_a_refused_connect_is_an_answer_and_a_silent_address_is_not(monkeypatch):
    import errno

    from osu_dl_bench.jobs import links

    with socket.socket() as closed:  # a port nothing listens on: refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert links.connect_answer("127.0.0.1", port, timeout=2) is None

    def silent(address, timeout):
        raise TimeoutError

    monkeypatch.setattr(links.socket, "create_connection", silent)
    assert links.connect_answer("x", timeout=0.3) == "no answer to a TCP connect within 0.3 s"

    def unreachable(address, timeout):
        raise OSError(errno.EHOSTUNREACH, "No route to host")

    monkeypatch.setattr(links.socket, "create_connection", unreachable)
    assert links.connect_answer("x") == "TCP connect failed: No route to host"


def test_addresses_come_from_the_launchers_host_list(monkeypatch):
    from osu_dl_bench.jobs import links

    monkeypatch.setenv(links.HOST_ADDRESSES_VARIABLE, "node1=10.0.0.1,bad,node2=10.0.0.2")
    seen = []
    answers = links.probe_nodes(["node1", "node2", "node3"], connect=seen.append)
    assert sorted(seen) == ["10.0.0.1", "10.0.0.2", "node3"]
    assert [a.text() for a in answers] == ["node1 (10.0.0.1)", "node2 (10.0.0.2)", "node3"]
