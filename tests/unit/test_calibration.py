"""The calibration files (measurement.calibration): jobs appended under their labels through
the run directory's store, and the in-launch sizes enough for the fit's pieces; the kernels
run here on COMM_SELF (timed by the kernel's loop) and across ranks in
tests/mpi/test_model.py."""

import json

import pandas as pd
import pytest
from mpi4py import MPI

from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement import calibration, heartbeat
from osu_dl_bench.measurement.calibration import (
    CALIBRATION_CSV,
    FIELDS,
    IN_LAUNCH_SIZES,
    MIN_SIZES,
    STEP_MAX_BYTES,
    Effort,
    measure,
    run_calibration_job,
    spread_order,
    write_calibration,
)
from osu_dl_bench.measurement.heartbeat import Heartbeat, file_name, read
from osu_dl_bench.measurement.store import RunStore, StoreError
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


def test_an_append_cuts_off_a_row_a_full_disk_cut_short_first(tmp_path):
    write_calibration(tmp_path, _rows("exchange", (8, 16), 1e-6), {}, False, "first")
    path = tmp_path / CALIBRATION_CSV
    path.write_bytes(path.read_bytes() + b"exchange,32,2,1e-0")  # the disk filled up here
    write_calibration(tmp_path, _rows("reduce", (8,), 2e-6), {}, True, "second")
    frame = pd.read_csv(path)
    assert list(frame["kind"]) == ["exchange", "exchange", "reduce"]
    assert list(frame["job"]) == ["first", "first", "second"]


def test_a_calibration_that_cannot_be_written_is_the_stores_one_message(tmp_path):
    (tmp_path / CALIBRATION_CSV).mkdir()  # where the file should go
    with pytest.raises(StoreError, match=CALIBRATION_CSV):
        write_calibration(tmp_path, _rows("exchange", (8,), 1e-6), {}, False)


class _RankZeroOfTwo:
    """Rank 0 of a 2-rank job on one host, as the job's body sees it: the checks pass and
    what rank 0 alone does runs here (the other rank's side is tests/mpi/test_model.py's)."""

    def Get_size(self) -> int:
        return 2

    def Get_rank(self) -> int:
        return 0

    def bcast(self, value, root: int = 0):
        return value

    def allgather(self, value) -> list:
        return [value, value]


def test_the_standalone_job_refuses_a_held_directory_before_it_measures(tmp_path, monkeypatch):
    measured = []

    def measure_stub(comm, sizes, effort, timer) -> list[dict]:
        measured.append(sizes)
        return _rows("exchange", sizes, 1e-6)

    monkeypatch.setattr(calibration, "measure", measure_stub)
    with RunStore(tmp_path).lock(), pytest.raises(UsageError, match="in use by another run"):
        run_calibration_job(_RankZeroOfTwo(), str(tmp_path), "8:16", 1, False)
    assert measured == [] and not (tmp_path / CALIBRATION_CSV).exists()
    run_calibration_job(_RankZeroOfTwo(), str(tmp_path), "8:16", 1, False)  # free once released
    assert measured == [[8, 16]] and len(pd.read_csv(tmp_path / CALIBRATION_CSV)) == 2


def test_the_kernels_are_timed_by_the_kernels_loop_so_a_stall_report_sees_them(
    tmp_path, monkeypatch
):
    heartbeat.create_files(tmp_path, 1)
    beat = Heartbeat(tmp_path / file_name(0), 0)
    monkeypatch.setattr(heartbeat, "_current", beat)
    rows = measure(MPI.COMM_SELF, (8,), Effort(rounds=2, target_s=1e-5, min_iterations=1))
    kinds = {"exchange", "reduce", "reduce_mpi", "step", "barrier"}  # no pingpong at p = 1
    assert {row["kind"] for row in rows} == kinds
    assert all(row["median_s"] > 0 and row["samples"] >= 2 for row in rows)
    after = read(tmp_path / file_name(0), 0)
    # Two untimed samples per kind, then two rounds of every kind: each call marked.
    assert after.completed == after.entered >= 4 * len(kinds)
