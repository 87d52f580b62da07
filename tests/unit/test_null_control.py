"""The null control: native measured a second time under its own labels, planned wherever
native is measured as a reference, never a twin of native and never a candidate."""

from __future__ import annotations

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
from osu_dl_bench.jobs.plan import (
    NULL_GROUP,
    Done,
    group_of,
    in_group,
    isolation_groups,
    resolve_setting,
    with_null_controls,
)
from osu_dl_bench.selection.adaptive import open_point
from osu_dl_bench.selection.tune import (
    build_table,
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
    setting = resolve_setting(sweep_config("--np", "2", "-a", "native,ring", "-o", "x"))
    assert _labels(setting.variants["allreduce"])[:2] == ["native", NULL_CONTROL]
    assert NULL_CONTROL_APART not in _labels(setting.variants["allreduce"])
    forced = sweep_config("--np", "2", "-a", "native,native:alg=ring", "-o", "x")
    labels = _labels(resolve_setting(forced).variants["allreduce"])
    assert labels[:3] == ["native", NULL_CONTROL, NULL_CONTROL_APART]


def test_no_null_plans_none_and_tells_the_jobs():
    cfg = sweep_config("--np", "2", "-a", "native,native:alg=ring", "--no-null", "-o", "x")
    assert not cfg.null_control and "--no-null" in cfg.worker_argv((2,), "--inside")
    labels = [v.label for vs in resolve_setting(cfg).variants.values() for v in vs]
    assert not {NULL_CONTROL, NULL_CONTROL_APART} & set(labels)
    on = sweep_config("--np", "2", "-o", "x")
    assert on.null_control and "--no-null" not in on.worker_argv((2,), "--inside")


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
