"""verify-export's C client: its source ships in the package, its output parses, and its
launches become pooled per-size ratios (no MPI job here)."""

from __future__ import annotations

import math

from osu_dl_bench.commands.verify_export import comparison_lines
from osu_dl_bench.jobs.c_client import client_argv, parse_latencies, source_text
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
    assert parse_latencies("garbage\n12 not-a-number\n") == {}


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
