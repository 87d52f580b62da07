"""Errors that only some ranks meet end the whole job with a message, never a hang."""

from __future__ import annotations

from osu_dl_bench.runtime.rank_agreement import joint_error


def test_joint_error_names_the_rank_unless_every_rank_agrees():
    assert joint_error([None, None]) is None
    assert joint_error(["x", "x", "x"]) == "x"
    assert joint_error([None, "bad table"]) == "rank 1: bad table"
    assert joint_error([None, "a", "b", None]) == "rank 1 (and 1 other rank): a"
    assert joint_error(["a", "b", "c"]) == "rank 0 (and 2 other ranks): a"
