"""verify-export's C client: its source ships in the package, its output parses, and its
launches become pooled per-size ratios (no MPI job here)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from osu_dl_bench.commands.verify_export import comparison_lines, refusal_lines
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import launch as job_launch
from osu_dl_bench.jobs.c_client import (
    ClientRun,
    client_argv,
    parse_latencies,
    run_client,
    source_text,
)
from osu_dl_bench.runtime.mpich_trees import FILE_VARIABLES, generic_trees
from osu_dl_bench.selection.exports.openmpi import (
    default_rules_text,
    parse_classic,
    rules_algorithm,
)
from osu_dl_bench.selection.exports.verification import (
    ARMS,
    DEFAULT_ARM,
    FILE_ARM,
    NULL_ARM,
    SizeVerdict,
    arm_order,
    client_latencies,
    client_pairs,
    client_records,
    client_verdicts,
    gain_beyond_null,
    null_control_environment,
    summarize,
    verdicts,
)
from osu_dl_bench.selection.paired import Ratio


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


def _latencies(factor_by_size, launches=6, seed=3, null_by_size=None):
    """Synthetic client latencies of the three arms: the machine's state moves every arm
    of a launch alike; the file multiplies the default's time by its size's factor, the
    null control by 1 (or by ``null_by_size``'s)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    found = {}
    for size, factor in factor_by_size.items():
        for launch in range(1, launches + 1):
            state = rng.lognormal(0, 0.3)
            base = 10.0 * state * rng.lognormal(0, 0.02)
            null = (null_by_size or {}).get(size, 1.0)
            for arm, times in ((DEFAULT_ARM, 1.0), (FILE_ARM, factor), (NULL_ARM, null)):
                noise = 1.0 if arm == DEFAULT_ARM else rng.lognormal(0, 0.02)
                found.setdefault(("allreduce", 2, size, arm), {})[launch] = base * times * noise
    return found


def test_launches_of_the_three_arms_pair_by_launch_and_pool_over_sizes():
    sizes = {8 << k: 1.0 for k in range(10)}
    sizes[8 << 10] = 0.5  # the file halves one size's time
    latencies = _latencies(sizes)
    pairs = client_pairs(latencies)
    assert len(pairs) == 11 and all(v.count == 6 for _, v in pairs)
    found = client_verdicts(latencies, lambda c, p, s: "ring" if s == 8 << 10 else None)
    lines = comparison_lines("c", found)
    halved = next(line for line in lines if "8K" in line and "ring" in line)
    speedup, interval = halved.split("ring")[1].split()[:2]
    assert math.isclose(float(speedup), 2.0, rel_tol=0.1) and float(interval.split("-")[0]) > 1
    assert halved.endswith("confirmed")
    # Where the file changes nothing, the intervals hold 1 about as often as they claim.
    unchanged = [line.split("default")[1].split()[1] for line in lines[:-3] if " default " in line]
    holding = sum(float(i.split("-")[0]) <= 1 <= float(i.split("-")[1]) for i in unchanged)
    assert len(unchanged) == 10 and holding >= 8
    assert lines[-3].startswith("# c: 11 sizes, ")
    assert lines[-1] == (
        "# c: the file departs from the default at 1 sizes: 1 confirmed beyond the null "
        "control, 0 refused"
    )


def test_too_few_sizes_for_a_pool_fall_back_to_each_sizes_own_launches():
    import numpy as np

    from osu_dl_bench.selection.evidence import LaunchValues

    nan = np.array([np.nan, np.nan])
    two = LaunchValues((1, 2), np.array([0.01, -0.02]), nan, False)
    one = LaunchValues((1,), np.array([0.01]), nan[:1], False)
    pairs = [(("bcast", 2, 8), two), (("bcast", 2, 16), one)]
    lines = comparison_lines("c", verdicts("c", pairs, pairs, lambda *_: None))
    assert "0.83-1.22" in lines[0]  # Student's t over the two launches
    assert "0.00->100" in lines[1]  # one launch: no bound either way, and no error
    assert lines[-3] == (
        "# c: 2 sizes, 0 slower with the file beyond the interval; the null control slower "
        "at 0 of 2 sizes (0.0%)"
    )


def test_the_three_arms_alternate_in_a_balanced_order():
    from collections import Counter

    for seed in range(6):
        orders = [arm_order(launch, seed) for launch in range(1, 7)]
        assert all(sorted(order) == sorted(ARMS) for order in orders)
        # Over 6 launches: every arm in every position twice, and right after every other
        # arm twice, so that neither position nor carry-over favours one arm.
        positions = Counter((i, arm) for order in orders for i, arm in enumerate(order))
        assert set(positions.values()) == {2} and len(positions) == 9
        follows = Counter(pair for order in orders for pair in zip(order, order[1:], strict=False))
        assert set(follows.values()) == {2} and len(follows) == 6
    assert arm_order(1, 0) != arm_order(1, 1)  # the seed picks the first row


def test_a_departure_without_a_gain_beyond_the_null_control_is_refused_and_a_real_one_kept():
    sizes = {8 << k: 1.0 for k in range(12)}
    sizes[8 << 10] = 0.5  # a real gain
    sizes[8 << 11] = 1.0  # the file names ring, which runs no faster here
    reader = lambda c, p, s: "ring" if s >= 8 << 10 else None  # noqa: E731
    found = client_verdicts(_latencies(sizes, launches=12), reader)
    by_size = {v.where[2]: v for v in found}
    assert by_size[8 << 10].confirmed and not by_size[8 << 10].refused
    assert by_size[8 << 11].refused and not by_size[8 << 11].confirmed
    assert "includes 1" in by_size[8 << 11].reason()
    assert not any(v.refused for v in found if v.where[2] < 8 << 10)  # the default is kept
    lines = refusal_lines(found)
    assert lines[0].startswith("# the export is refused at 1 sizes (exit 3)")
    assert "allreduce p=2 16K (ring)" in lines[1]
    assert summarize(found).false_gain_rate <= 0.1


def test_a_gain_inside_the_null_controls_spread_is_not_confirmed():
    # Interval of the file below 1, but the null control at that size came out as fast:
    # the A/A spread there reaches the file's gain.
    file = Ratio(0.80, 0.75, 0.85, 10, 0)
    assert gain_beyond_null(file, Ratio(1.0, 0.9, 1.1, 10, 0))
    assert not gain_beyond_null(file, Ratio(0.82, 0.78, 0.87, 10, 0))
    assert not gain_beyond_null(file, None)  # without a null control, nothing is confirmed
    assert not gain_beyond_null(Ratio(0.9, 0.8, 1.01, 10, 0), Ratio(1.0, 0.99, 1.01, 10, 0))


def test_the_null_controls_rules_file_states_open_mpis_own_decision_everywhere():
    text = default_rules_text()
    assert set(parse_classic(text)) == {2, 7}  # allreduce and bcast
    for collective in ("allreduce", "bcast"):
        for nprocs in (1, 2, 3, 64):
            assert all(
                rules_algorithm(text, collective, nprocs, s) is None for s in (0, 8, 1 << 30)
            )


def test_the_null_controls_environment_loads_a_file_as_an_export_is_loaded(tmp_path):
    env = null_control_environment("openmpi", tmp_path)
    path = env["OMPI_MCA_coll_tuned_dynamic_rules_filename"]
    assert env["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"
    assert Path(path).read_text() == default_rules_text()
    # MPICH: its generic trees of every layer as files, with a choice it cannot apply loud.
    env = null_control_environment("mpich", tmp_path)
    generic = generic_trees()
    for layer, variable in FILE_VARIABLES.items():
        assert json.loads(Path(env[variable]).read_text()) == generic.tree(layer)
    assert env["MPIR_CVAR_COLLECTIVE_FALLBACK"] == "error"


def test_a_departure_slower_than_the_default_is_refused_as_slower():
    slower = SizeVerdict(("allreduce", 2, 32), "ring", Ratio(2.0, 1.9, 2.1, 12, 0), None)
    assert slower.refused and slower.reason() == "no null control measured at this size"
    null = Ratio(1.0, 0.9, 1.1, 12, 0)
    slower = SizeVerdict(("allreduce", 2, 32), "ring", Ratio(2.0, 1.9, 2.1, 12, 0), null)
    assert slower.reason() == "slower than the default: its speedup's 95% CI 0.48-0.53 lies below 1"


def test_the_client_latencies_kept_as_records_give_the_same_verdicts_read_back():
    latencies = _latencies({8 << k: 1.0 for k in range(4)}, launches=3)
    records = json.loads(json.dumps(client_records(latencies)))
    assert len(records) == 4 * 3 * 3 and set(records[0]) >= {"arm", "launch", "us"}
    assert client_latencies(records) == latencies


def _client_measurement(tmp_path, monkeypatch, client):
    """verify-export's C client launches with ``client`` standing in for run_client."""
    from osu_dl_bench.cli import build_parser
    from osu_dl_bench.commands import verify_export
    from osu_dl_bench.commands.verify_export import sweep_config
    from osu_dl_bench.commands.verify_export_cli import config_from_args

    file = tmp_path / "t.mpich.json"
    file.write_text(json.dumps(generic_trees().trees["mpir"]))
    argv = ["verify-export", str(file), "--np", "2", "-m", "8:16", "-o", str(tmp_path / "run")]
    cfg = config_from_args(build_parser().parse_args(argv))
    monkeypatch.setattr(verify_export, "run_client", client)
    sweep = sweep_config(cfg, cfg.run_dir, [])
    binaries = {"allreduce": Path("c"), "bcast": Path("c")}
    return lambda: verify_export.measure_client(cfg, "mpich", sweep, binaries)


def test_a_c_client_launch_that_fails_loses_none_of_the_launches_before_it(tmp_path, monkeypatch):
    from osu_dl_bench.selection.exports.verification import CLIENT_FILE

    calls = []

    def client(run, env, mpi):
        calls.append(run.what)
        if len(calls) == 4:
            raise UsageError("the C client failed (exit 1)")
        return {8: 10.0 + len(calls), 16: 20.0}

    measure = _client_measurement(tmp_path, monkeypatch, client)
    with pytest.raises(UsageError, match="failed"):
        measure()
    kept = json.loads((tmp_path / "run" / CLIENT_FILE).read_text())
    assert len(kept) == 3 * 2  # the three launches before the failure, two sizes each
    assert sorted({r["launch"] for r in kept}) == [1]


def test_sigterm_during_the_c_client_ends_with_130_and_keeps_its_launches(
    tmp_path, monkeypatch, capsys
):
    import os
    import signal

    from osu_dl_bench.jobs.orchestrate import JobFailed
    from osu_dl_bench.jobs.runinfo import record_completion
    from osu_dl_bench.measurement.store import RunStore
    from osu_dl_bench.selection.exports.verification import CLIENT_FILE

    store = RunStore(tmp_path / "run")
    store.create()
    record_completion(store, complete=True)  # the sweep before the client finished
    calls = []

    def client(run, env, mpi):
        calls.append(run.what)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # a batch system's kill, mid-launch
            time.sleep(5)
        return {8: 10.0, 16: 20.0}

    with pytest.raises(JobFailed) as stopped:
        _client_measurement(tmp_path, monkeypatch, client)()
    assert stopped.value.code == 130 and len(calls) == 3
    assert "interrupted: the C client's latencies so far are kept in" in capsys.readouterr().err
    assert len(json.loads((tmp_path / "run" / CLIENT_FILE).read_text())) == 2 * 2
    assert store.read_metadata()["complete"] is True
