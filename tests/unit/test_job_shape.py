"""collectives.shape.JobShape: ``problem``, the one judge of whether nodes and ranks per
node can hold a job's ranks, used by the results reader, the table loader and ``select``;
``packed``, ranks a given number to a node; and the emulated node size from the
environment, refused when it is no count."""

from __future__ import annotations

import json

import pytest
from support.tuning import METADATA, make_entry, make_table, model_points, point, write_run

from collectives.errors import UsageError
from collectives.shape import JobShape
from collectives.topology import RANKS_PER_NODE_ENV, emulated_ranks_per_node
from osu_dl_bench.cli import main
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.selection.table import TableError, load_table


@pytest.mark.parametrize(
    "shape",
    [(1, 1, None), (4, 1, 4), (4, 2, None), (3, 2, 2), (4, 3, 2), (4, 3, None), (6, 4, 2)],
)
def test_layouts_that_can_place_every_rank_pass(shape):
    assert JobShape(*shape).problem() is None


@pytest.mark.parametrize(
    "shape,words",
    [
        ((2, 1, 5), "5 ranks per node is more than the job's 2 ranks"),
        ((2, 1, 0), "got ranks per node 0"),
        ((0, 1, None), "got ranks 0"),
        ((4, 5, None), "5 nodes cannot each run one of 4 ranks"),
        ((8, 2, 3), "2 nodes of 3 ranks hold 6, fewer than 8 ranks"),
        ((5, 3, 4), "5 ranks cannot fill a node with 4 and give each of the other 2 nodes one"),
    ],
)
def test_impossible_layouts_say_why(shape, words):
    assert words in JobShape(*shape).problem()


@pytest.mark.parametrize(
    "nprocs,ppn,shape",
    [(8, 4, (8, 2, 4)), (5, 2, (5, 3, 2)), (3, 8, (3, 1, 3)), (1, 1, (1, 1, 1))],
)
def test_ranks_packed_ppn_to_a_node_fill_as_few_nodes_as_hold_them(nprocs, ppn, shape):
    packed = JobShape.packed(nprocs, ppn)
    assert packed == JobShape(*shape) and packed.problem() is None


def test_packing_ranks_zero_to_a_node_is_refused():
    with pytest.raises(ValueError, match="ranks per node >= 1, got 0"):
        JobShape.packed(4, 0)


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--np", "2", "--ppn", "5"], "--np 2 --nodes 1 --ppn 5: 5 ranks per node is more"),
        (["--np", "2", "--ppn", "0"], "got ranks per node 0"),
        (["--np", "4", "--nodes", "5"], "--np 4 --nodes 5: 5 nodes cannot each run one"),
        (["--np", "2", "--size", ",,,"], "--size ',,,': expected at least one size"),
    ],
)
def test_select_refuses_impossible_layouts_and_empty_size_lists(capsys, argv, words):
    size = [] if "--size" in argv else ["--size", "8"]
    assert main(["select", *size, *argv]) == 2
    assert words in capsys.readouterr().err


def test_a_table_entry_no_job_can_have_is_refused_on_load(tmp_path):
    entry = make_entry(2, [(0, "native")], nodes=3, ppn=5)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(make_table(entry).as_dict()))
    with pytest.raises(TableError, match=r"entries\[0\].*5 ranks per node is more"):
        load_table(path)


def test_rows_that_cannot_be_a_measurement_are_dropped_and_the_table_loads(tmp_path):
    rows = model_points(nprocs_list=(2,))
    bad = [
        point("allreduce", "native", -8, 10.0, 1.0, nprocs=2),
        point("allreduce", "native", 16, 10.0, 1.0, nprocs=2, nodes=1, ppn=5),
    ]
    run = write_run(tmp_path / "run", [*rows, *bad], METADATA)
    frame, notes = RunStore(run).read()
    assert (frame["size_bytes"] >= 0).all() and len(frame) == len(rows)
    assert "size_bytes '-8' is below 0" in notes[0]
    assert "5 ranks per node is more than the job's 2 ranks" in notes[0]
    assert main(["tune", str(run), "-o", str(tmp_path / "t.json")]) == 0
    load_table(tmp_path / "t.json")


@pytest.mark.parametrize("value", ["abc", "0", "-1", "2.5", "2\x1b[31m"])
def test_an_emulated_node_size_that_is_no_count_is_refused(monkeypatch, value):
    monkeypatch.setenv(RANKS_PER_NODE_ENV, value)
    with pytest.raises(UsageError, match=f"{RANKS_PER_NODE_ENV}=.*expected a whole number"):
        emulated_ranks_per_node()


def test_an_unset_or_empty_variable_emulates_nothing_and_a_count_is_taken(monkeypatch):
    monkeypatch.setenv(RANKS_PER_NODE_ENV, "")
    assert emulated_ranks_per_node() is None
    monkeypatch.setenv(RANKS_PER_NODE_ENV, "3")
    assert emulated_ranks_per_node() == 3
