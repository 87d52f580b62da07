"""Per-rank timing without MPI: the summaries measurement.ranks computes, the rows a run
keeps, and triage's verdicts (diagnosis.ranks) on evidence built by hand."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from support.sweep import sweep_point

from osu_dl_bench.commands.triage import TriageConfig, run_triage
from osu_dl_bench.diagnosis.ranks import (
    EVIDENCE_COLUMNS,
    evidence_from_records,
    evidence_from_run,
    triage,
)
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.ranks import ClockSync, summaries_of, summarise
from osu_dl_bench.measurement.store import SWEEP_FIELDS, RunStore


def test_summaries_measure_lag_wait_and_finish_from_the_earliest_and_last_rank():
    # Three ranks, two calls: rank 2 arrives 5 us after rank 0 and 3 us after rank 1.
    arrival = np.array([[0.0, 10.0], [2.0, 12.0], [5.0, 15.0]]) * 1e-6
    duration = np.array([[9.0, 9.0], [7.0, 7.0], [4.0, 4.0]]) * 1e-6
    # Each rank's row from its own calls and the per-call extremes over all ranks, as
    # rank_summaries computes it rank by rank.
    extremes = arrival.min(axis=0), arrival.max(axis=0), (arrival + duration).min(axis=0)
    table = summarise(arrival, duration, *extremes)
    first, second, late = summaries_of(table, ("a", "a", "b"))
    assert late.node == "b" and late.lag_us == pytest.approx(5.0)
    assert late.wait_us == pytest.approx(0.0) and first.wait_us == pytest.approx(5.0)
    assert second.finish_us == pytest.approx(0.0)  # 2 + 7 = 9, the earliest finish
    assert first.finish_us == pytest.approx(0.0) and late.finish_us == pytest.approx(0.0)
    assert late.last_share == 1.0 and first.last_share == 0.0
    assert first.p99_us == pytest.approx(9.0)


def test_stamps_move_onto_rank_zeros_clock():
    clock = ClockSync(np.array([0.0, 1.5, -2.0]), 1e-6)
    stamps = np.array([[[10.0]], [[11.5]], [[8.0]]])
    assert np.allclose(clock.to_rank0(stamps), 10.0)


def _evidence(lags_us: dict[int, float], points: int = 12, call_us: float = 3000.0, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(points):
        for rank, lag in lags_us.items():
            jitter = abs(rng.normal(0, 15))
            rows.append(
                {
                    "point": f"allreduce native {8 << p} B",
                    "size_bytes": 8 << p,
                    "rank": rank,
                    "node": f"node{rank // 2 + 1}",
                    "lag_us": lag + jitter,
                    "finish_us": abs(rng.normal(0, 15)),
                    "wait_us": 0.0,
                    "call_us": call_us,
                }
            )
    return pd.DataFrame(rows, columns=EVIDENCE_COLUMNS)


def test_a_rank_that_arrives_a_call_late_is_named_with_its_delay():
    named = triage(_evidence({0: 0, 1: 10, 2: 2000, 3: 20}))
    late = [n for n in named if n.kind == "late"]
    assert [n.unit for n in late] == ["rank 2 (node2)", "node2"]
    assert late[0].micros.excess == pytest.approx(2000, rel=0.05)
    assert late[0].points_over == late[0].points == 12


def test_each_message_regime_is_judged_on_its_own():
    # node2's link slows only the large messages: named there, not among the small ones.
    small = _evidence({0: 0, 1: 10, 2: 20, 3: 10}, points=6)
    large = _evidence({0: 0, 1: 10, 2: 2500, 3: 10}, points=4, seed=1)
    large["size_bytes"] += 1 << 20
    large["point"] += " (large)"
    named = triage(pd.concat([small, large], ignore_index=True))
    assert {(n.regime, n.unit) for n in named} == {
        ("messages >= 64 KiB", "rank 2 (node2)"),
        ("messages >= 64 KiB", "node2"),
    }
    # Two points of a regime are too few to judge.
    assert triage(large[large["size_bytes"] < (1 << 20) + 32]) == []


def test_uniform_ranks_and_small_barrier_skews_are_not_named():
    # Barrier exit order: rank 3 always 60 us behind, a fifth of a 300 us call.
    assert triage(_evidence({0: 0, 1: 20, 2: 30, 3: 60}, call_us=300.0)) == []
    for seed in range(5):
        assert triage(_evidence({r: 10 for r in range(5)}, seed=seed)) == []


def test_evidence_from_a_bench_csv_and_from_a_run_directory(tmp_path):
    per_rank = [
        {"rank": r, "node": "h", "lag_us": r, "wait_us": 0, "finish_us": 1, "p99_us": 2}
        for r in range(3)
    ]
    records = pd.DataFrame(
        [
            {"collective": "bcast", "algorithm": "native", "size_bytes": 8, "p50_us": 5.0}
            | {"avg_us": 4.0, "per_rank": json.dumps(per_rank)}
        ]
    )
    evidence = evidence_from_records(records)
    assert list(evidence["lag_us"]) == [0, 1, 2] and set(evidence["call_us"]) == {5.0}

    point = sweep_point(64, median=100.0)
    cells = {"rank_lag_us": "0.000 2.500", "rank_wait_us": "2.500 0.000"}
    cells |= {"rank_finish_us": "0.000 1.000", "rank_p99_us": "3.000 4.000"}
    frame = pd.DataFrame([{**point.__dict__, **cells, "nprocs": 2}])
    metadata = {"jobs": {"2": {"launches": {"1/shared": {"rank_nodes": ["n1", "n2"]}}}}}
    evidence = evidence_from_run(frame, metadata)
    assert list(evidence["node"]) == ["n1", "n2"] and list(evidence["lag_us"]) == [0, 2.5]


def test_a_run_written_before_per_rank_columns_continues_with_its_own_header(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create()
    old = [name for name in SWEEP_FIELDS if not name.startswith("rank_")]
    store.results_path.write_text(",".join(old) + "\n")
    store.check_appendable()
    store.append([sweep_point(8)])
    assert store.results_path.read_text().splitlines()[0] == ",".join(old)
    assert len(store.load()) == 1


def test_per_rank_cells_may_hold_zero_but_not_negative_lags(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create()
    zero = sweep_point(8).__dict__ | {"rank_lag_us": "0.000 1.000"}
    negative = sweep_point(16).__dict__ | {"rank_lag_us": "-1.000 1.000"}
    store.append([type(sweep_point(8))(**zero), type(sweep_point(8))(**negative)])
    frame, notes = store.read()
    assert list(frame["size_bytes"]) == [8] and "rank_lag_us" in notes[0]


def test_triage_refuses_what_holds_no_per_rank_timing(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([{"collective": "bcast", "avg_us": 1.0}]))
    for source, message in (
        (plain, "no per-rank timing"),
        (tmp_path / "missing.json", "no such file"),
        (tmp_path, "no results.csv"),
    ):
        with pytest.raises(UsageError, match=message):
            run_triage(TriageConfig(source, 0.5))


def test_triage_refuses_malformed_per_rank_timing_in_one_message(tmp_path):
    base = {"collective": "bcast", "algorithm": "native", "size_bytes": 8, "p50_us": 1.0}
    for per_rank in ([{"rank": 0}], "\x1b[31mnot json", [{"rank": "x", "lag_us": 1}]):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps([{**base, "avg_us": 1.0, "per_rank": per_rank}]))
        with pytest.raises(UsageError, match="not what bench --per-rank writes"):
            run_triage(TriageConfig(path, 0.5))


def test_a_lag_the_clocks_cannot_resolve_is_not_named():
    # 0.6 us behind on 1 us calls is a large share, but the clocks agree only to 5 us.
    evidence = _evidence({0: 0.0, 1: 0.6, 2: 0.0, 3: 0.0}, call_us=1.6)
    evidence["lag_us"] = evidence["lag_us"].clip(upper=0.6)
    evidence.loc[evidence["rank"] != 1, "lag_us"] = 0.0
    evidence["finish_us"] = 0.0
    assert [n.unit for n in triage(evidence)][:1] == ["rank 1 (node1)"]
    evidence["residual_us"] = 5.0
    assert triage(evidence) == []


def test_too_few_points_are_said_to_be_too_few_not_judged_clean(tmp_path):
    from osu_dl_bench.diagnosis.ranks import report_lines

    evidence = _evidence({0: 0, 1: 2000, 2: 0}, points=2)
    lines = report_lines(evidence, triage(evidence), 0.5)
    assert "too few to judge" in lines[2] and lines[-1].startswith("too few points to judge")
    assert not any("nothing stands out" in line for line in lines)


def test_a_hand_edited_metadata_gives_no_nodes_rather_than_a_crash():
    frame = pd.DataFrame(
        [
            {**sweep_point(64).__dict__, "rank_lag_us": "0.000 1.000", "rank_wait_us": "1 0"}
            | {"rank_finish_us": "0 0", "rank_p99_us": "1 1", "nprocs": 2}
        ]
    )
    for metadata in ({"jobs": {"2": {"launches": []}}}, {"jobs": []}, {"jobs": {"2": 7}}):
        assert list(evidence_from_run(frame, metadata)["node"]) == ["", ""]


@pytest.fixture
def no_hang():
    """Turn a read that blocks (a FIFO) into a failure after 10 s instead of a hung suite."""
    import signal

    def hung(*_):
        raise AssertionError("blocked for 10 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_triage_refuses_a_fifo_a_device_and_a_huge_file(tmp_path, no_hang, monkeypatch):
    import os

    from osu_dl_bench import jsonfile

    os.mkfifo(tmp_path / "fifo.csv")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    monkeypatch.setattr(jsonfile, "MAX_FILE_BYTES", 1000)
    (tmp_path / "huge.json").write_text(" " * 2000)
    monkeypatch.setattr(jsonfile.read_regular_file, "__defaults__", (1000,))
    for name, message in (
        ("fifo.csv", "not a regular file"),
        ("zero.json", "not a regular file"),
        ("huge.json", "larger than 1000 bytes"),
    ):
        with pytest.raises(UsageError, match=message):
            run_triage(TriageConfig(tmp_path / name, 0.5))


def _bench_record(lag: object, node: str = "h") -> dict:
    per_rank = [
        {"rank": r, "node": node, "lag_us": lag if r else 0.0, "wait_us": 0, "finish_us": 1}
        for r in range(2)
    ]
    return {"collective": "bcast", "algorithm": "native", "size_bytes": 8, "p50_us": 5.0} | {
        "per_rank": per_rank
    }


def test_triage_refuses_lags_that_are_no_time_as_the_run_directory_does(tmp_path):
    for lag in (float("inf"), -3.0, float("nan"), "abc", True):
        records = [_bench_record(lag)]
        for suffix in (".json", ".csv"):
            path = tmp_path / f"bench{suffix}"
            if suffix == ".json":
                path.write_text(json.dumps(records))  # Python's json writes Infinity, NaN
            else:
                frame = pd.DataFrame(records)
                frame["per_rank"] = frame["per_rank"].map(json.dumps)
                frame.to_csv(path, index=False)
            with pytest.raises(UsageError) as got:
                run_triage(TriageConfig(path, 0.5))
            message = str(got.value)
            assert "lag_us" in message or "not a number JSON allows" in message, (lag, message)
            assert "Error" not in message and "pandas" not in message, message


def test_triage_says_what_a_damaged_csv_is_without_pandas_words(tmp_path):
    path = tmp_path / "bench.csv"
    path.write_bytes(b'a,b\n"1,2\n\xff\xfe')
    with pytest.raises(UsageError, match="cannot be read as CSV: not a file bench -o wrote"):
        run_triage(TriageConfig(path, 0.5))


def test_triage_of_a_train_bench_run_says_what_reads_it(tmp_path):
    from osu_dl_bench.measurement.store import TRAINING_STEP

    store = RunStore(tmp_path / "run")
    store.create()
    store.append(
        [type(sweep_point(8))(**(sweep_point(8).__dict__ | {"collective": TRAINING_STEP}))]
    )
    with pytest.raises(UsageError, match="holds train-bench's training steps") as got:
        run_triage(TriageConfig(tmp_path / "run", 0.5))
    assert "from this version on" not in str(got.value)


def test_a_newline_in_a_node_name_is_shown_escaped(tmp_path, capsys):
    path = tmp_path / "bench.json"
    records = []
    for size in (8, 16, 32, 64):
        records.append(_bench_record(1.0, node="evil\nrank 9 arrives late") | {"size_bytes": size})
    path.write_text(json.dumps(records))
    assert run_triage(TriageConfig(path, 0.5)) == 0
    out = capsys.readouterr().out
    assert "evil\\nrank 9" in out and "\nrank 9 arrives late" not in out
