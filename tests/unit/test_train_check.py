"""The table check's parts in one process: its balanced order, its candidates, the rule's
verdict from timed calls, the table of the choices kept in training and the guard of its
test hook. The real runs: tests/mpi/test_train_check.py."""

import argparse
import json
from collections import Counter

import numpy as np
import pytest

from collectives.registry import NULL_CONTROL
from osu_dl_bench.commands.train_cli import add_arguments, config_from_args
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.selector import Query, Selector
from osu_dl_bench.selection.table import Entry, EntryKey, load_table, table_from_dict
from osu_dl_bench.train.check import (
    CheckCost,
    CheckPlan,
    candidate_labels,
    check_lines,
    judge_size,
    size_groups,
    trained_table,
)
from osu_dl_bench.train.comm_hooks import (
    SLOW_CANDIDATE_ENV,
    parse_slow_candidate,
    slow_candidate_hook,
)

KEY = EntryKey("allreduce", "cpu", 1, 2, 2)
RING = "ring:seg=64K"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("seed", [0, 3])
def test_each_round_gives_every_candidate_one_step_at_every_bucket(seed):
    labels = (("a", "b", "c"), ("a", "b", "c", "d", "e"), ("x", "y"))
    plan = CheckPlan(10, labels, seed)
    assert plan.steps == 50 and plan.covers(10) and plan.covers(59) and not plan.covers(60)
    for bucket, names in enumerate(labels):
        n = len(names)
        for round_ in range(plan.steps // n):
            picks = [plan.candidate(round_ * n + k, bucket) for k in range(n)]
            assert sorted(picks) == list(range(n)), (bucket, round_)
    # Neighbouring buckets of as many candidates run different ones in the same step.
    same = CheckPlan(0, (("a", "b", "c"), ("a", "b", "c")), seed)
    assert all(same.candidate(s, 0) != same.candidate(s, 1) for s in range(same.steps))


def test_the_candidates_are_the_choice_native_the_null_and_two_contenders():
    points = (
        {"size_bytes": 1024, "chosen": "ring", "median_us": 1.0, "tie_set": ["tree"]},
        {
            "size_bytes": 1 << 20,
            "chosen": RING,
            "median_us": 9.0,
            "tie_set": [RING, "rabenseifner", "tree", "native"],
            "fastest": "shm:chunk=16M",
        },
    )
    entry = Entry(KEY, (), (1024, 1 << 20), points)
    assert candidate_labels(RING, entry, 900_000) == (
        RING,
        "native",
        NULL_CONTROL,
        "rabenseifner",
        "tree",
    )
    assert candidate_labels("native", None, 4096) == ("native", NULL_CONTROL)


def _durations(plan: CheckPlan, us: dict[str, float], spread: float = 0.02) -> np.ndarray:
    """steps x buckets of seconds: each candidate's time, a little noise around it."""
    rng = np.random.default_rng(1)
    out = np.empty((plan.steps, len(plan.labels)))
    for step in range(plan.steps):
        for bucket, names in enumerate(plan.labels):
            label = names[plan.candidate(step, bucket)]
            out[step, bucket] = us[label] * 1e-6 * rng.lognormal(0, spread)
    return out


def test_a_choice_slower_in_training_is_replaced_by_the_rules_choice():
    plan = CheckPlan(2, ((RING, "native", NULL_CONTROL),) * 2)
    slow = _durations(plan, {RING: 400.0, "native": 200.0, NULL_CONTROL: 200.0})
    verdict = judge_size(KEY, plan, slow, [0, 1], 131072, {})
    assert not verdict.holds and verdict.kept == "native" and verdict.rule_choice == "native"
    ring = verdict.times(RING)
    assert ring.calls == 20 and 1.9 < ring.ratio < 2.1 and ring.ratio_low > 1.05
    assert 380 < ring.measured_us < 420 and ring.low_us <= ring.measured_us <= ring.high_us
    assert 0.95 < verdict.null_ratio < 1.05 and verdict.null_chosen is False

    fast = _durations(plan, {RING: 100.0, "native": 200.0, NULL_CONTROL: 200.0})
    verdict = judge_size(KEY, plan, fast, [0, 1], 131072, {})
    assert verdict.holds and verdict.kept == RING and verdict.best == RING


def test_buckets_of_one_size_are_judged_together():
    plan = CheckPlan(
        0,
        ((RING, "native", NULL_CONTROL), ("native", NULL_CONTROL), (RING, "native", NULL_CONTROL)),
    )
    assert size_groups(plan, [131072, 640, 131072]) == {640: [1], 131072: [0, 2]}


def _table_dict():
    choice = {"backend": "mpi", "algorithm": "ring", "params": {"seg": 65536}}
    chain = {"backend": "mpi", "algorithm": "chain", "params": {}}
    entries = [
        {
            "collective": collective,
            "device": "cpu",
            "nodes": 1,
            "ppn": 2,
            "nprocs": 2,
            "measured_bytes": [8, 1 << 24],
            "ranges": [{"min_bytes": 0, "max_bytes": None, "choice": c}],
        }
        for collective, c in (("allreduce", choice), ("bcast", chain))
    ]
    return {"schema_version": 1, "entries": entries, "provenance": {"run_dir": None}}


def test_the_trained_table_is_valid_and_the_selector_picks_the_kept_choices(tmp_path):
    source = table_from_dict(_table_dict(), tmp_path / "source.json")
    plan = CheckPlan(2, ((RING, "native", NULL_CONTROL), ("native", NULL_CONTROL)))
    slow = _durations(plan, {RING: 400.0, "native": 200.0, NULL_CONTROL: 200.0})
    verdicts = [
        judge_size(KEY, plan, slow, [0], 131072, {}),
        judge_size(KEY, plan, slow, [1], 640, {}),
    ]
    provenance = {"model": "cnn", "buckets": [{"index": 0, "nbytes": 131072}], "nprocs": 2}
    path = trained_table(source, KEY, verdicts, provenance).write(tmp_path / "out.json")
    table = load_table(path)  # the schema's validation
    assert table.header["provenance"]["measured_in_training"]["model"] == "cnn"
    assert table.header["provenance"]["source_table"].endswith("source.json")
    selector = Selector(table, force={})
    for size in (640, 131072, 1 << 22):
        assert selector.decide(Query("allreduce", 2, size, "cpu", 1, 2)).label == "native"
    assert selector.decide(Query("bcast", 2, 4096, "cpu", 1, 2)).label == "chain:seg=256K"
    written = json.loads(path.read_text())
    point = next(e for e in written["entries"] if e["collective"] == "allreduce")["points"][1]
    assert point["chosen"] == "native" and "rule chose it over" in point["reason"]


def test_the_report_names_the_verdict_the_null_and_the_cost():
    from osu_dl_bench.train.check import CheckRecord, step_verdict

    plan = CheckPlan(2, ((RING, "native", NULL_CONTROL),))
    slow = _durations(plan, {RING: 400.0, "native": 200.0, NULL_CONTROL: 200.0})
    verdict = judge_size(KEY, plan, slow, [0], 131072, {})
    record = CheckRecord(
        2,
        30,
        0,
        "the host's clock",
        "none",
        [verdict],
        step_verdict([verdict], 0, 1.0, 2.0),
        CheckCost.of(30, 3.3, 3.0),
        adapted=True,
        switched=[{"nbytes": 131072, "buckets": [0], "from": RING, "to": "native"}],
    )
    text = "\n".join(check_lines(record))
    assert "does not hold: the rule chooses native" in text
    assert "null control (native twice)" in text and "the rule would not choose it" in text
    assert "+0.30% of 1,000 plain steps" in text  # 0.3 s over 1,000 x 0.1 s
    assert CheckCost.of(30, 3.3, 3.2, 2.8).share_of_1000_steps == pytest.approx(0.003)
    assert CheckCost.of(30, 3.3, None).share_of_1000_steps is None
    assert f"128K: {RING} -> native" in text


@pytest.mark.parametrize(
    "validate,check,env,message",
    [
        (False, True, "ring:0.1", "test hook for --check-table with --validate"),
        (True, False, "ring:0.1", "test hook for --check-table with --validate"),
        (True, True, "ring", "expected LABEL:SECONDS"),
        (True, True, "ring:20", "expected LABEL:SECONDS"),
        (True, True, "ring:-1", "expected LABEL:SECONDS"),
    ],
)
def test_the_slow_candidate_hook_is_refused_outside_a_validated_check(
    validate, check, env, message
):
    with pytest.raises(UsageError, match=message):
        slow_candidate_hook({SLOW_CANDIDATE_ENV: env}, validate, check)


def test_the_slow_candidate_hook_reads_labels_with_parameters():
    assert parse_slow_candidate("ring:seg=64K:0.05") == (RING, 0.05)
    assert slow_candidate_hook({}, False, False) is None


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--check-table"], "give --table"),
        (["--adapt"], "give --table"),
        (["--write-table", "x.json"], "give --table"),
        (["--adapt", "--table", "T", "--allreduce", "ring"], "--allreduce ring would replace"),
    ],
)
def test_the_check_needs_a_table_and_no_fixed_allreduce(argv, message, tmp_path):
    table = tmp_path / "t.json"
    table.write_text(json.dumps(_table_dict()))
    argv = [str(table) if a == "T" else a for a in argv]
    with pytest.raises(UsageError, match=message):
        config_from_args(_args(*argv))


def test_adapt_and_write_table_run_the_check(tmp_path):
    table = tmp_path / "t.json"
    table.write_text(json.dumps(_table_dict()))
    cfg = config_from_args(_args("--table", str(table), "--write-table", "o.json"))
    assert cfg.checks_table and not cfg.adapt and cfg.write_table == "o.json"
    assert config_from_args(_args("--table", str(table), "--adapt")).checks_table
    assert not config_from_args(_args("--table", str(table))).checks_table


def test_calls_counted_once_each():
    plan = CheckPlan(0, ((RING, "native", NULL_CONTROL, "tree"),))
    counts = Counter(plan.labels[0][plan.candidate(s, 0)] for s in range(plan.steps))
    assert set(counts.values()) == {10}
