"""The null control: native measured a second time under its own labels, planned wherever
native is measured as a reference, never a twin of native and never a candidate."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from support.sweep import sweep_config
from support.tuning import decision, launch_rows, machine_states, scaled, write_run

from collectives import distinct_variants
from collectives.registry import (
    NULL_CONTROL,
    NULL_CONTROL_APART,
    NullControl,
    null_control,
    parse_variant,
    twin_representatives,
)
from osu_dl_bench.cli import main
from osu_dl_bench.commands import plot
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.orchestrate import measuring_spec
from osu_dl_bench.jobs.plan import (
    NULL_GROUP,
    Done,
    group_of,
    in_group,
    isolation_groups,
    resolve_setting,
    with_null_controls,
)
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.model.measured import model_rows
from osu_dl_bench.selection import Query, Selector
from osu_dl_bench.selection.adaptive import open_point
from osu_dl_bench.selection.null_control import (
    NULL_FIELD,
    NullFigures,
    NullPoint,
    figures_of,
    ratio_range,
    record_line,
)
from osu_dl_bench.selection.paired import Ratio
from osu_dl_bench.selection.summary import table_summary
from osu_dl_bench.selection.table import EntryKey, load_table
from osu_dl_bench.selection.tune import (
    RISK,
    build_table,
    decide_run,
    decision_rows,
    run_nulls,
    without_contaminated_native,
    without_null_controls,
)


def _labels(variants) -> list[str]:
    return [v.label for v in variants]


def test_the_null_control_runs_natives_code_under_its_own_label():
    native = parse_variant("allreduce", "native")
    null = null_control(native)
    assert isinstance(null, NullControl) and null.label == NULL_CONTROL
    assert null.algorithm is native.algorithm and dict(null.params) == dict(native.params)
    assert null_control(native, NULL_CONTROL_APART).label == NULL_CONTROL_APART
    with pytest.raises(ValueError, match="plain native"):
        null_control(parse_variant("allreduce", "ring"))


def test_the_null_control_is_never_a_twin_of_native():
    native = parse_variant("bcast", "native")
    both = [native, null_control(native), null_control(native, NULL_CONTROL_APART)]
    assert _labels(distinct_variants(both, 2, 1, 4)) == _labels(both)
    kept = twin_representatives("bcast", ["native", NULL_CONTROL, NULL_CONTROL_APART], 2, 1, 4)
    assert kept == {label: label for label in kept}


def test_a_sweep_plans_the_null_beside_native_and_apart_where_candidates_cross_launches():
    setting = resolve_setting(sweep_config("--np", "2", "-a", "native,ring", "-o", "x").measure)
    assert _labels(setting.variants["allreduce"])[:2] == ["native", NULL_CONTROL]
    assert NULL_CONTROL_APART not in _labels(setting.variants["allreduce"])
    forced = sweep_config("--np", "2", "-a", "native,native:alg=ring", "-o", "x")
    labels = _labels(resolve_setting(forced.measure).variants["allreduce"])
    assert labels[:3] == ["native", NULL_CONTROL, NULL_CONTROL_APART]


def test_no_null_plans_none_and_tells_the_jobs():
    cfg = sweep_config("--np", "2", "-a", "native,native:alg=ring", "--no-null", "-o", "x")
    assert not measuring_spec(cfg, (2, 1, "mpi")).measure.null_control
    labels = [v.label for vs in resolve_setting(cfg.measure).variants.values() for v in vs]
    assert not {NULL_CONTROL, NULL_CONTROL_APART} & set(labels)
    on = sweep_config("--np", "2", "-o", "x")
    assert measuring_spec(on, (2, 1, "mpi")).measure.null_control


def test_without_native_there_is_no_null():
    ring = parse_variant("allreduce", "ring")
    assert with_null_controls([ring]) == [ring]


def _variant(name: str, backend: str) -> SimpleNamespace:
    return SimpleNamespace(algorithm=SimpleNamespace(name=name, backend=backend), label=name)


def test_the_null_runs_in_every_group_native_runs_in_and_apart_in_its_own():
    native = parse_variant("allreduce", "native")
    null, apart = null_control(native), null_control(native, NULL_CONTROL_APART)
    assert group_of(null) == "mpi" and group_of(apart) == NULL_GROUP
    for group in ("mpi", "gloo", None):
        assert in_group(native, group) and in_group(null, group), group
    assert not in_group(null, "alg_ring") and not in_group(native, "alg_ring")
    assert [in_group(v, NULL_GROUP) for v in (native, null, apart)] == [False, False, True]
    assert not in_group(apart, "mpi") and not in_group(apart, "gloo")


def test_the_null_group_is_launched_only_beside_a_group_paired_across_launches():
    native = parse_variant("allreduce", "native")
    apart = null_control(native, NULL_CONTROL_APART)
    gloo = _variant("gloo", "gloo")
    plans = [SimpleNamespace(eligible=[native, apart, gloo])]
    assert isolation_groups(plans) == ["mpi", "gloo", NULL_GROUP]
    assert isolation_groups([SimpleNamespace(eligible=[native, apart])]) == ["mpi"]


def test_a_focused_launch_that_measures_native_measures_its_null_and_no_more():
    done = Done(
        focus={2: frozenset({(2, "allreduce", 8, "native"), (2, "allreduce", 8, NULL_CONTROL)})}
    )
    assert done.native_alone(2, 2, "allreduce", 8)
    wanted = frozenset({(2, "allreduce", 8, "native"), (2, "allreduce", 8, "ring")})
    assert not Done(focus={2: wanted}).native_alone(2, 2, "allreduce", 8)


def _run_with_a_lucky_null(path, null: bool = True):
    """Sizes 1K..64K: native, ring 1.5x slower, recursive_doubling at native's time, and
    (``null``) native's null control measured at half native's time in every launch: were
    it a candidate, it would win everywhere."""
    rows = []
    for offset, size in enumerate(1024 << np.arange(7)):
        states = machine_states(launches=3, rounds=20, seed=offset)
        rows += launch_rows("allreduce", "native", int(size), states)
        rows += launch_rows("allreduce", "ring", int(size), scaled(states, 1.5, seed=offset + 9))
        same = scaled(states, 1.0, seed=offset + 19)
        rows += launch_rows("allreduce", "recursive_doubling", int(size), same)
        if null:
            lucky = scaled(states, 0.5, seed=offset + 29)
            rows += launch_rows("allreduce", NULL_CONTROL, int(size), lucky)
    return write_run(path, rows)


def test_the_null_control_is_never_chosen_and_leaves_the_decisions_as_without_it(tmp_path):
    table, warn = build_table(_run_with_a_lucky_null(tmp_path / "with"), "t")
    plain, plain_warn = build_table(_run_with_a_lucky_null(tmp_path / "old", null=False), "t")
    assert not any(NULL_CONTROL in line for line in warn), warn
    assert warn == plain_warn
    for entry, old in zip(table.entries, plain.entries, strict=True):
        assert entry.ranges == old.ranges
        assert all(NULL_CONTROL not in (p["chosen"], *p["tie_set"]) for p in entry.points)
        assert [p["ratio"] for p in entry.points] == [p["ratio"] for p in old.points]


def test_the_null_beside_another_backend_is_left_out_as_native_is_there():
    frame = pd.DataFrame(
        {
            "algorithm": ["native", NULL_CONTROL, "native", NULL_CONTROL, NULL_CONTROL_APART],
            "group": ["mpi", "mpi", "gloo", "gloo", NULL_GROUP],
        }
    )
    kept = without_contaminated_native(frame)
    assert list(kept["group"]) == ["mpi", "mpi", NULL_GROUP]
    assert list(without_null_controls(kept)["algorithm"]) == ["native"]


def test_an_adaptive_launch_measures_the_null_wherever_it_measures_native():
    found = open_point(
        decision(64, {"recursive_doubling": (0.85, 0.80, 0.90), "rabenseifner": (0.83, 0.7, 0.98)})
    )
    assert found is not None
    assert found.labels[:3] == ("native", NULL_CONTROL, NULL_CONTROL_APART)


def _aa_run(path, sizes: int = 24, seed: int = 0, launches: int = 3):
    """An A/A sweep: at each size native and its null control drawn from the same
    distribution (the launch's shared machine state, a launch factor of each one's own
    with sd 5%, and 5% jitter per round), plus a slower candidate drawn alike, so the run
    has a pool."""
    rng = np.random.default_rng(seed)
    rows = []
    for offset, size in enumerate(64 << np.arange(sizes)):
        states = machine_states(launches=launches, rounds=20, seed=seed + offset)
        base = seed * 1000 + offset * 10
        for number, (label, factor) in enumerate(
            (("native", 1.0), (NULL_CONTROL, 1.0), ("ring", 1.3))
        ):
            drift = list(factor * rng.lognormal(0.0, 0.05, launches))
            times = scaled(states, drift, 0.05, base + number)
            rows += launch_rows("allreduce", label, int(size), times)
    return write_run(path, rows)


def test_on_a_to_a_data_the_false_win_rate_stays_at_or_below_the_risk(tmp_path):
    wins = judged = 0
    for seed in range(4):
        figures = run_nulls(_aa_run(tmp_path / f"run{seed}", seed=seed))
        (found,) = figures
        assert found.label == NULL_CONTROL and len(found.points) == 24
        wins, judged = wins + found.wins, judged + len(found.points)
    assert judged == 96 and wins / judged <= RISK


def test_a_null_that_wins_is_counted_and_reported_in_the_table(tmp_path):
    table, _ = build_table(_run_with_a_lucky_null(tmp_path / "run"), "t")
    (record,) = figures_of(table.header)
    assert record["label"] == NULL_CONTROL and record["nprocs"] == 2
    assert record["false_wins"] == record["points_judged"] == 7
    assert all(p["chosen"] and p["ratio"] < 0.6 for p in record["points"])
    line = record_line(record)
    assert line.startswith(f"{NULL_CONTROL}: 0.") and "at 7 of 7 points (100.0%)" in line


def test_a_table_of_a_run_without_null_has_no_null_field(tmp_path):
    table, _ = build_table(_run_with_a_lucky_null(tmp_path / "run", null=False), "t")
    assert NULL_FIELD not in table.header and figures_of(table.header) == []


def test_tunes_summary_and_selects_explanation_give_the_entrys_null_figures(tmp_path):
    table, _ = build_table(_run_with_a_lucky_null(tmp_path / "run"), "t")
    path = table.write(tmp_path / "t.json")
    loaded = load_table(path)  # the schema accepts the field, and it survives loading
    assert figures_of(loaded.header) == figures_of(table.header)
    summary = table_summary(loaded)
    (line,) = [ln for ln in summary.splitlines() if "null control" in ln]
    assert line.strip().startswith(f"null control {NULL_CONTROL}: 0.")
    assert line.endswith("chosen over native at 7 of 7 points (100.0%)")
    text = Selector(loaded).explain(Query("allreduce", 2, 4096))
    assert f"  null control {NULL_CONTROL}: 0." in text


def test_compare_gives_the_false_win_rate_of_each_run_per_p(tmp_path, capsys):
    lucky = _run_with_a_lucky_null(tmp_path / "a")
    old = _run_with_a_lucky_null(tmp_path / "b", null=False)
    assert main(["compare", str(lucky), str(old)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"# null control in {lucky}, p=2: chosen over native at 7 of 7 points (100.0%)" in lines
    assert f"# null control in {old}: not measured (a run from before it, or --no-null)" in lines


def test_a_tables_null_figures_are_checked_when_it_loads(tmp_path):
    table, _ = build_table(_run_with_a_lucky_null(tmp_path / "run"), "t")
    path = table.write(tmp_path / "t.json")
    data = json.loads(path.read_text())
    data[NULL_FIELD]["entries"][0]["false_wins"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="false_wins"):
        load_table(path)


def test_the_ratio_plot_draws_the_null_control_beside_the_candidates(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    drawn = []
    monkeypatch.setattr(plot, "_save", lambda plt, fig, path: drawn.append((path, fig)))
    plot.plot_run(str(_run_with_a_lucky_null(tmp_path / "run")), out_dir=str(tmp_path / "p"))
    ((_, fig),) = [(path, fig) for path, fig in drawn if path.name.endswith("_ratios.png")]
    labels = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert f"{NULL_CONTROL} (null control: 7 of 7 chosen)" in labels


def test_the_model_fits_native_once_without_its_null_control(tmp_path):
    run = _run_with_a_lucky_null(tmp_path / "run")
    rows = model_rows(RunStore(run).load())
    assert "native" in set(rows["algorithm"]) and not set(rows["algorithm"]) & {NULL_CONTROL}


def test_naming_the_null_control_as_a_candidate_is_refused_with_the_reason():
    for text in (NULL_CONTROL, NULL_CONTROL_APART):
        cfg = sweep_config("--np", "2", "-a", f"ring,{text}", "-o", "x")
        with pytest.raises(UsageError, match="the null control is not a candidate"):
            resolve_setting(cfg.measure)


def test_an_entry_decided_without_native_says_so_once(tmp_path):
    rows, warn = decision_rows(_run_with_a_lucky_null(tmp_path / "run", null=False))
    decide_run(rows[rows["algorithm"] != "native"], warn)
    found = [line for line in warn if "no native measured" in line]
    assert len(found) == 1 and found[0].endswith(
        ": no native measured: ratios to the lowest median, no null control"
    )
    warn = []
    decide_run(rows, warn)
    assert not any("no native measured" in line for line in warn)


def _degenerate_null() -> NullFigures:
    """Seven points near 1, and one of one launch whose interval reaches 0.0007-14554.8."""
    points = [NullPoint(64 << i, Ratio(0.95, 0.9, 1.05, 3, 60), False) for i in range(7)]
    points.append(NullPoint(1 << 14, Ratio(0.27, 0.0007, 14554.8, 1, 20), True))
    return NullFigures(EntryKey("allreduce", "cpu", 1, 2, 2), NULL_CONTROL, tuple(points))


def test_the_null_line_gives_the_median_interval_not_the_union_of_every_point_s():
    text = ratio_range(_degenerate_null().points)
    assert text == "0.27-0.95x native (median 95% CI 0.90-1.05)"


def test_the_ratio_plot_clips_the_null_band_to_the_estimates_reach():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    plot._null_line(ax, _degenerate_null(), [0.8, 1.2])
    (band,) = ax.collections
    heights = band.get_paths()[0].vertices[:, 1]
    assert heights.min() >= 0.27 / 2 and heights.max() <= 1.2 * 2
    plt.close(fig)
