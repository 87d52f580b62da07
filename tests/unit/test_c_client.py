"""verify-export's C client: its source ships in the package, its output parses, and its
launches become pooled per-size ratios (no MPI job here)."""

from __future__ import annotations

import math
import time

import pytest

from osu_dl_bench.commands.verify_export import comparison_lines
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import launch as job_launch
from osu_dl_bench.jobs.c_client import (
    ClientRun,
    client_argv,
    parse_latencies,
    run_client,
    source_text,
)
from osu_dl_bench.selection.exports.verification import client_pairs


def test_the_client_source_ships_with_the_package_and_times_as_osu_does():
    text = source_text()
    assert "MPI_Barrier" in text and "MPI_Wtime" in text and "MPI_Reduce" in text
    assert "MPI_Allreduce" in text and "MPI_Bcast" in text


def test_ours_and_ombs_output_parse_to_size_and_mean_latency():
    ours = "8 0.3069\n16 0.3123\n"
    omb = "# OSU MPI Allreduce Latency Test v7.4\n# Size       Avg Latency(us)\n4  1.25\n8 1.50\n"
    assert parse_latencies(ours) == {8: 0.3069, 16: 0.3123}
    assert parse_latencies(omb) == {4: 1.25, 8: 1.5}
    assert parse_latencies("garbage\n# 12 a header\n") == {}


@pytest.mark.parametrize(
    "line",
    [
        "299999999999999999999999999 1.5",
        "12 not-a-number",
        "8 nan",
        "8 inf",
        "8 -1.5",
        "8 0",
        "1048576 2.0",  # beyond the sizes asked for
    ],
)
def test_a_client_printing_garbage_is_refused_not_recorded(line):
    with pytest.raises(UsageError, match="the C client printed .*expected a size from 8 to 64"):
        parse_latencies(f"# Size Avg Latency(us)\n8 1.25\n{line}\n", 8, 64)


def _fake_client(tmp_path, monkeypatch, script: str) -> ClientRun:
    """A client that is a shell script run without a launcher."""
    monkeypatch.setattr(job_launch, "launcher_prefix", lambda nprocs, mpi=None: [])
    client = tmp_path / "client.sh"
    client.write_text(script)
    return ClientRun(
        ["sh", str(client)], 1, "launch 1/2, p=1, allreduce, with the file", 1.0, 8, 64
    )


def test_a_client_that_hangs_is_stopped_at_its_timeout_with_progress_meanwhile(
    tmp_path, monkeypatch, capsys
):
    run = _fake_client(tmp_path, monkeypatch, "sleep 30\n")
    started = time.monotonic()
    with pytest.raises(UsageError, match=r"did not finish within 1 s \(--client-timeout\)"):
        run_client(run, {}, None, every=0.3)
    assert time.monotonic() - started < 15
    out = capsys.readouterr().out
    assert "# C client: launch 1/2, p=1, allreduce, with the file (up to 1 s)" in out
    assert "still running after" in out


def test_a_client_that_prints_no_latency_is_refused(tmp_path, monkeypatch):
    run = _fake_client(tmp_path, monkeypatch, "echo hello\n")
    with pytest.raises(UsageError, match="printed no latency"):
        run_client(run, {}, None)
    run = _fake_client(tmp_path, monkeypatch, "echo 8 1.5; echo 16 2.5\n")
    assert run_client(run, {}, None) == {8: 1.5, 16: 2.5}


def test_client_arguments_for_ours_and_for_omb():
    assert client_argv("b", "bcast", 8, 64, omb=False)[:4] == ["b", "bcast", "8", "64"]
    assert client_argv("b", "bcast", 8, 64, omb=True)[:3] == ["b", "-m", "8:64"]


def _latencies(factor_by_size, launches=6, seed=3):
    import numpy as np

    rng = np.random.default_rng(seed)
    found = {}
    for size, factor in factor_by_size.items():
        for launch in range(1, launches + 1):
            state = rng.lognormal(0, 0.3)  # the machine's state moves both alike
            base = 10.0 * state * rng.lognormal(0, 0.02)
            found.setdefault(("allreduce", 2, size, False), {})[launch] = base
            with_file = base * factor * rng.lognormal(0, 0.02)
            found.setdefault(("allreduce", 2, size, True), {})[launch] = with_file
    return found


def test_launches_with_and_without_the_file_pair_by_launch_and_pool_over_sizes():
    sizes = {8 << k: 1.0 for k in range(10)}
    sizes[8 << 10] = 0.5  # the file halves one size's time
    pairs = client_pairs(_latencies(sizes))
    assert len(pairs) == 11 and all(v.count == 6 for _, v in pairs)
    lines = comparison_lines("c", pairs, lambda c, p, s: "ring" if s == 8 << 10 else None)
    halved = next(line for line in lines if "8K" in line and "ring" in line)
    speedup, interval = halved.split("ring")[1].split()[:2]
    assert math.isclose(float(speedup), 2.0, rel_tol=0.1) and float(interval.split("-")[0]) > 1
    # Where the file changes nothing, the intervals hold 1 about as often as they claim.
    unchanged = [line.split("default")[1].split()[1] for line in lines if "default" in line]
    holding = sum(float(i.split("-")[0]) <= 1 <= float(i.split("-")[1]) for i in unchanged)
    assert len(unchanged) == 10 and holding >= 8
    assert lines[-1].startswith("# c: 11 sizes, ")


def test_too_few_sizes_for_a_pool_fall_back_to_each_sizes_own_launches():
    import numpy as np

    from osu_dl_bench.selection.evidence import LaunchValues

    nan = np.array([np.nan, np.nan])
    two = LaunchValues((1, 2), np.array([0.01, -0.02]), nan, False)
    one = LaunchValues((1,), np.array([0.01]), nan[:1], False)
    lines = comparison_lines(
        "c", [(("bcast", 2, 8), two), (("bcast", 2, 16), one)], lambda *_: None
    )
    assert "0.83-1.22" in lines[0]  # Student's t over the two launches
    assert "0.00->100" in lines[1]  # one launch: no bound either way, and no error
    assert lines[-1] == "# c: 2 sizes, 0 slower with the file beyond the interval"
