"""The calibration files (measurement.calibration): jobs appended under their labels, and
the in-launch sizes enough for the fit's pieces; the kernels themselves run in
tests/mpi/test_model.py."""

import json

import pandas as pd

from osu_dl_bench.measurement.calibration import (
    FIELDS,
    IN_LAUNCH_SIZES,
    MIN_SIZES,
    STEP_MAX_BYTES,
    spread_order,
    write_calibration,
)
from osu_dl_bench.model.fit import fit_pieces


def _rows(kind: str, sizes, seconds: float) -> list[dict]:
    return [
        dict(zip(FIELDS, (kind, n, 2, seconds, seconds, seconds, 3, 0), strict=True)) for n in sizes
    ]


def test_jobs_append_under_their_labels_and_metadata_lists_each(tmp_path):
    write_calibration(tmp_path, _rows("exchange", (8, 16), 1e-6), {"host": "a"}, False)
    write_calibration(tmp_path, _rows("exchange", (8,), 2e-6), {"host": "b"}, True, "p2-launch2")
    frame = pd.read_csv(tmp_path / "calibration.csv", dtype={"job": str})
    assert list(frame["job"]) == ["0", "0", "p2-launch2"]  # the standalone job: its index
    meta = json.loads((tmp_path / "calibration.json").read_text())
    assert [job["job"] for job in meta["jobs"]] == ["0", "p2-launch2"]
    assert meta["host"] == "b"  # the last job's, on top


def test_a_new_calibration_replaces_an_earlier_one(tmp_path):
    write_calibration(tmp_path, _rows("exchange", (8, 16), 1e-6), {}, False, "old")
    write_calibration(tmp_path, _rows("reduce", (8,), 1e-6), {}, False, "new")
    frame = pd.read_csv(tmp_path / "calibration.csv")
    assert list(frame["job"]) == ["new"] and list(frame["kind"]) == ["reduce"]


def test_in_launch_sizes_give_every_piece_of_the_fit_its_points():
    sizes = sorted(IN_LAUNCH_SIZES)
    assert len([n for n in sizes if n <= STEP_MAX_BYTES]) >= 4  # the step and barrier kinds
    # Two regimes (a slope change at 512 KiB) are found from the in-launch sizes alone.
    times = [1e-6 + (3e-11 if n < 512 << 10 else 1.2e-10) * n for n in sizes]
    pieces = fit_pieces(pd.Series(sizes).to_numpy(float), pd.Series(times).to_numpy(float))
    assert [p.min_x for p in pieces] == [0, 512 << 10]


def test_a_calibration_cut_short_still_spans_the_sizes():
    order = spread_order(IN_LAUNCH_SIZES)
    assert sorted(order) == sorted(IN_LAUNCH_SIZES)
    first = order[:MIN_SIZES]  # what a launch measures however slow the node
    assert min(first) == min(IN_LAUNCH_SIZES) and max(first) >= 1 << 20
    assert len([n for n in order[: 2 * MIN_SIZES] if n <= STEP_MAX_BYTES]) >= 3
