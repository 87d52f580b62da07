"""The model fitted and scored as the sweep measures: the ceiling (odd launches predicting
even ones), predictions scaled to a point's machine state, corrections fitted to a sweep,
and the fit reading the calibration rows a sweep's launches wrote."""

import json

import numpy as np
import pandas as pd
import pytest

from collectives.registry import parse_variant
from collectives.shape import JobShape
from osu_dl_bench.cli import build_parser, main
from osu_dl_bench.commands import model as model_command
from osu_dl_bench.commands.model_cli import DEFAULT_SCALING, config_from_args
from osu_dl_bench.commands.model_cli import SCALINGS as OPTION_SCALINGS
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import RunStore, SweepPoint
from osu_dl_bench.model import accuracy
from osu_dl_bench.model.corrections import fit_corrections, fit_to_sweep, formula_parts
from osu_dl_bench.model.costs import predict_parts, predict_seconds
from osu_dl_bench.model.measured import model_rows
from osu_dl_bench.model.platform import (
    ContentionState,
    Correction,
    Platform,
    PlatformError,
    Reference,
    load_platform,
    platform_from_dict,
    simple_link,
)
from osu_dl_bench.model.platform_fit import fit_platform, has_calibration
from osu_dl_bench.model.state import SCALINGS, state_factors

ALPHA, BETA, GAMMA, OVERHEAD = 2e-6, 1e-10, 5e-11, 1e-6
REF = Reference(copy_s=100e-6, allreduce_s=2e-6)
SIZES = [8 << k for k in range(22)]  # 8 B .. 16 MiB
RING = "ring:seg=0"


def _platform(scaling: str = "none") -> Platform:
    link = simple_link(ALPHA, BETA, GAMMA)
    state = ContentionState(2, link, OVERHEAD, None, REF)
    return Platform("t", link, link, 2, OVERHEAD, False, states=(state,), state_scaling=scaling)


def _rows(times: dict[int, list[float]], algorithm: str = RING, **columns) -> pd.DataFrame:
    """Sweep rows of one variant at p = 2: size -> median_us per launch (launch 1, 2, ...)."""
    rows = [
        {
            "collective": "allreduce",
            "backend": "mpi",
            "algorithm": algorithm,
            "size_bytes": size,
            "nprocs": 2,
            "nodes": 1,
            "ppn": 2,
            "median_us": us,
            "launch": launch,
            "group": "mpi",
            **columns,
        }
        for size, per_launch in times.items()
        for launch, us in enumerate(per_launch, start=1)
    ]
    return pd.DataFrame(rows)


# --- the ceiling ------------------------------------------------------------------------


def test_ceiling_of_two_equal_halves_is_100_percent():
    rows = _rows({n: [10.0 * k, 10.0 * k] for k, n in enumerate(SIZES, start=1)})
    ceiling = accuracy.ceiling(rows)
    assert len(ceiling) == len(SIZES)
    assert ceiling["accuracy"].to_numpy() == pytest.approx(1.0)


def test_ceiling_of_a_known_shift_is_the_metric_of_that_shift():
    # Odd launches (1, 3) measure 100 us, even ones (2, 4) 125 us: 1 - 25 / 125 = 0.8.
    rows = _rows({n: [100.0, 125.0, 100.0, 125.0] for n in (8, 1 << 20)})
    ceiling = accuracy.ceiling(rows)
    assert ceiling["accuracy"].to_numpy() == pytest.approx([0.8, 0.8])
    assert list(ceiling["large"]) == [False, True]


def test_ceiling_takes_the_median_of_each_half_and_the_last_row_of_a_remeasured_point():
    rows = _rows({1 << 20: [100.0, 125.0, 100.0, 125.0, 900.0]})
    # Launch 2 measured again after an outlying state: its last row (125) is the one kept.
    again = rows[rows["launch"] == 2].assign(median_us=125.0)
    rows.loc[rows["launch"] == 2, "median_us"] = 5000.0
    rows = pd.concat([rows, again], ignore_index=True)
    # Odd launches 100, 100, 900: median 100; even 125, 125.
    assert accuracy.ceiling(rows)["accuracy"].to_numpy() == pytest.approx([0.8])


def test_a_sweep_of_one_launch_has_no_ceiling_and_says_so():
    rows = _rows({n: [50.0] for n in SIZES})
    assert accuracy.ceiling(rows) is None
    result = accuracy.compare(_platform(), rows)
    text = accuracy.report(result, _platform(), None)
    assert text.rstrip().splitlines()[-1].endswith("(ceiling: n/a (one launch))")


def test_report_prints_each_figure_beside_its_ceiling():
    platform = _platform()
    exact = [predict_seconds(platform, "allreduce", _ring(), JobShape(2, 1, 2), n) for n in SIZES]
    # Launch 1 as predicted, launch 2 25% slower: the model scores 1 - 12.5/112.5 on the
    # launches' median, the ceiling 0.8.
    rows = _rows({n: [t * 1e6, t * 1.25e6] for n, t in zip(SIZES, exact, strict=True)})
    result = accuracy.compare(platform, rows)
    ceiling = accuracy.ceiling(rows, result)
    assert result["accuracy"].to_numpy() == pytest.approx(1 - 0.125 / 1.125)
    last = accuracy.report(result, platform, ceiling).rstrip().splitlines()[-1]
    assert last == "average accuracy (messages >= 64K): 88.89% (ceiling 80.00%)"


def test_ceiling_leaves_out_what_the_model_does_not_predict():
    rows = pd.concat(
        [_rows({1 << 20: [100.0, 125.0]}), _rows({1 << 20: [1.0, 9.0]}, algorithm="gloo")]
    )
    result = accuracy.compare(_platform(), rows)
    ceiling = accuracy.ceiling(rows, result)
    assert list(ceiling["algorithm"]) == [RING]


def test_native_of_another_backends_launches_is_left_out():
    clean = _rows({1 << 20: [100.0, 100.0]}, algorithm="native")
    beside_gloo = clean.assign(group="gloo", median_us=400.0)
    rows = model_rows(pd.concat([clean, beside_gloo]))
    assert list(rows["median_us"]) == [100.0, 100.0]


def test_the_librarys_forced_algorithms_are_not_native_to_the_model():
    clean = _rows({1 << 20: [100.0, 100.0]}, algorithm="native")
    forced = clean.assign(algorithm="native:alg=ring", group="alg_ring", median_us=70.0)
    rows = model_rows(pd.concat([clean, forced]))
    assert set(rows["algorithm"]) == {"native"} and list(rows["median_us"]) == [100.0, 100.0]


# --- scaling to the machine state -------------------------------------------------------


def _ring():
    return parse_variant("allreduce", RING)


def _state_rows(copy_us: str, allreduce_us: str, latency: float, data: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "nprocs": [2],
            "ref_copy": [np.median([float(v) for v in copy_us.split()]) * 1e-6],
            "ref_allreduce": [np.median([float(v) for v in allreduce_us.split()]) * 1e-6],
            "latency_us": [latency],
            "bandwidth_us": [data],
        }
    )


@pytest.mark.parametrize(
    ("how", "latency", "data", "factor"),
    [
        ("none", 1.0, 1.0, 1.0),
        ("copy", 1.0, 1.0, 2.0),
        ("allreduce", 1.0, 1.0, 1.5),
        ("blend", 0.0, 5.0, 2.0),  # all per-byte: the copy's factor
        ("blend", 5.0, 0.0, 1.5),  # all per-message: the allreduce's
        ("blend", 1.0, 1.0, np.sqrt(2.0 * 1.5)),
    ],
)
def test_state_factor_is_the_points_reference_over_the_calibrations(how, latency, data, factor):
    # The point's copy took 200 us (the calibration's 100), its allreduce 3 us (2).
    rows = _state_rows("200 190 210", "3 3 3", latency, data)
    assert state_factors(rows, _platform(), how) == pytest.approx([factor])


def test_a_row_without_reference_is_not_scaled():
    rows = _state_rows("200", "3", 1.0, 1.0).assign(ref_copy=np.nan)
    assert state_factors(rows, _platform(), "copy") == pytest.approx([1.0])


def test_a_launch_measured_in_a_slow_state_is_predicted_slow():
    platform = _platform("copy")
    exact = predict_seconds(platform, "allreduce", _ring(), JobShape(2, 1, 2), 1 << 20) * 1e6
    rows = _rows({1 << 20: [exact, 3 * exact]})
    # Launch 2's copy reference ran 3x the calibration's: its prediction is 3x too.
    rows["ref_copy_us"] = ["100 100", "300 300"]
    rows["ref_allreduce_us"] = ["2 2", "2 2"]
    result = accuracy.compare(platform, rows)
    assert result["pred_us"].to_numpy() == pytest.approx([2 * exact])  # median of 1x and 3x
    assert result["accuracy"].to_numpy() == pytest.approx([1.0])
    unscaled = accuracy.compare(_platform("none"), rows)
    assert unscaled["accuracy"].to_numpy() == pytest.approx([0.5])


def test_the_options_offer_the_models_scalings():
    assert OPTION_SCALINGS == SCALINGS and DEFAULT_SCALING in SCALINGS


# --- corrections ------------------------------------------------------------------------


def _corrected_times(platform: Platform, latency: float, data: float, p: int = 2) -> dict:
    layout = JobShape(p, 1, p)
    times = {}
    for n in SIZES:
        lat, bw = predict_parts(platform, "allreduce", _ring(), layout, n)
        times[n] = (latency * lat + data * bw) * 1e6
    return times


def test_corrections_recover_known_factors_per_size_band():
    platform = _platform()
    small, large = _corrected_times(platform, 3.0, 0.5), _corrected_times(platform, 1.0, 2.0)
    measured = pd.DataFrame(
        {
            "collective": "allreduce",
            "algorithm": RING,
            "nprocs": 2,
            "nodes": 1,
            "ppn": 2,
            "size_bytes": SIZES,
            "median_us": [small[n] if n < 65536 else large[n] for n in SIZES],
        }
    )
    corrections = fit_corrections(platform, measured)
    assert [(c.min_bytes, c.latency, c.bandwidth) for c in corrections] == [
        (0, pytest.approx(3.0, rel=1e-3), pytest.approx(0.5, rel=1e-3)),
        (65536, pytest.approx(1.0, rel=1e-3), pytest.approx(2.0, rel=1e-3)),
    ]


def test_a_corrected_platform_predicts_its_variant_and_layout_only():
    platform = _platform()
    fix = Correction("allreduce", RING, 2, 1, 0, 2.0, 3.0)
    corrected = Platform(**{**platform.__dict__, "corrections": (fix,)})
    two, four = JobShape(2, 1, 2), JobShape(4, 1, 4)
    lat, bw = predict_parts(platform, "allreduce", _ring(), two, 4096)
    assert predict_seconds(corrected, "allreduce", _ring(), two, 4096) == pytest.approx(
        2 * lat + 3 * bw
    )
    for layout in (four, JobShape(2, 2, 1)):
        assert predict_seconds(corrected, "allreduce", _ring(), layout, 4096) == predict_seconds(
            platform, "allreduce", _ring(), layout, 4096
        )


def test_corrections_fitted_with_scaling_cancel_the_states_of_the_fit_sweep(tmp_path):
    """Launch 2 of the fit sweep ran 2x slow, and its copy reference says so: the
    corrections come out as if both launches ran in the calibration's state."""
    base = _platform()
    truth = _corrected_times(base, 1.5, 1.5)
    rows = _rows({n: [t, 2 * t] for n, t in truth.items()})
    rows["ref_copy_us"] = ["100"] * len(rows)
    rows.loc[rows["launch"] == 2, "ref_copy_us"] = "200"
    rows["ref_allreduce_us"] = "2"
    fitted = fit_to_sweep(base, rows, "copy")
    assert fitted.state_scaling == "copy"
    factors = [(c.latency, c.bandwidth) for c in fitted.corrections]
    assert np.array(factors) == pytest.approx(np.full((2, 2), 1.5), rel=1e-3)
    # Unscaled, the fit sees the median of 1x and 2x: 1.5 times too slow.
    unscaled = fit_to_sweep(base, rows, "none")
    assert unscaled.corrections[1].bandwidth == pytest.approx(1.5 * 1.5, rel=1e-3)
    loaded = load_platform(fitted.write(tmp_path / "platform.json"))
    assert loaded.corrections == fitted.corrections and loaded.state_scaling == "copy"
    assert loaded.states[0].reference == REF


def test_a_platform_file_with_two_corrections_for_one_place_is_refused():
    data = json.loads(json.dumps(_platform().as_dict()))
    fix = Correction("allreduce", RING, 2, 1, 0, 2.0, 3.0).as_dict()
    data["corrections"] = [fix, fix]
    with pytest.raises(PlatformError, match="one correction per variant"):
        platform_from_dict(data)


def test_formula_parts_are_nan_where_nothing_is_modelled():
    frame = pd.DataFrame(
        {"collective": "allreduce", "algorithm": ["gloo"], "nprocs": 2, "nodes": 1, "ppn": 2}
    ).assign(size_bytes=1024)
    assert formula_parts(_platform(), frame)[["latency_us", "bandwidth_us"]].isna().to_numpy().all()


# --- the fit reads the sweep's own calibration rows -------------------------------------


def _in_run_calibration(run_dir, jobs: dict[str, float]) -> None:
    """Calibration rows as a sweep's launches write them: job label -> reference copy."""
    rows = []
    for job, copy_s in jobs.items():
        for n in SIZES:
            rows.append(("exchange", n, 2, ALPHA + BETA * n, job))
            rows.append(("reduce", n, 2, 3e-7 + GAMMA * n, job))
        for n in (8, 64, 512, 4096):
            rows.append(("step", n, 2, ALPHA + BETA * n + OVERHEAD, job))
            rows.append(("barrier", n, 2, 4e-6, job))
        rows.append(("ref_copy", 0, 2, copy_s, job))
        rows.append(("ref_allreduce", 0, 2, 2e-6, job))
    frame = pd.DataFrame(rows, columns=["kind", "size_bytes", "nprocs", "median_s", "job"])
    run_dir.mkdir(parents=True, exist_ok=True)
    frame.to_csv(run_dir / "calibration.csv", index=False)
    (run_dir / "calibration.json").write_text(json.dumps({"cores_per_node": 2, "hosts": ["h"]}))


def _point(size: int, us: float, launch: int) -> SweepPoint:
    """A stored sweep row of the ring allreduce at p = 2."""
    return SweepPoint(
        "allreduce", "mpi", RING, "float32", "sum", "cpu", size, size // 4, 2, 1, 2,
        us, us, us, 0.0, us, us, 3, 10, 1.0, 1.0, "pass", launch=launch, group="mpi",
    )  # fmt: skip


def test_fit_keeps_the_median_reference_of_the_sweeps_launches(tmp_path):
    _in_run_calibration(tmp_path, {"p2-launch1": 90e-6, "p2-launch2": 100e-6, "p2-launch3": 1e-3})
    assert has_calibration(tmp_path)
    platform, _ = fit_platform(tmp_path)
    assert platform.states[0].reference == Reference(100e-6, 2e-6)
    assert platform.intra.at(1 << 20)[1] == pytest.approx(BETA, rel=1e-3)


def test_model_fit_uses_the_sweeps_calibration_without_a_job_and_corrects(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _in_run_calibration(run, {"p2-launch1": 100e-6, "p2-launch2": 100e-6})

    def no_job(*args):
        raise AssertionError("model fit started a calibration job")

    monkeypatch.setattr(model_command, "_calibrate", no_job)
    assert main(["model", "fit", str(run)]) == 0
    assert not load_platform(run).corrections  # no sweep in RUN: the formulas as they are
    truth = _corrected_times(fit_platform(run)[0], 2.0, 0.5)
    RunStore(run).append([_point(n, t, launch) for n, t in truth.items() for launch in (1, 2)])
    assert main(["model", "fit", str(run)]) == 0
    fitted = load_platform(run)
    assert {c.key for c in fitted.corrections} == {("allreduce", RING, 2, 1)}
    assert fitted.provenance["corrections"]["results"].endswith("results.csv")
    assert main(["model", "fit", str(run), "--no-corrections"]) == 0
    assert not load_platform(run).corrections


def _model_config(*argv: str):
    """The config of ``osu-dl-bench model ARGV``."""
    return config_from_args(build_parser().parse_args(["model", *argv]))


def test_model_fit_never_without_calibration_rows_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--calibrate never"):
        model_command.run_fit(_model_config("fit", str(tmp_path), "--calibrate", "never"))
