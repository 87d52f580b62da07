"""selection.tune.clean_rows: the one cleaning of a run's rows, with named options for
what the model keeps that decisions do not."""

from __future__ import annotations

import dataclasses

import pandas as pd
from support.tuning import point

from osu_dl_bench.selection.tune import clean_rows


def _frame() -> pd.DataFrame:
    def row(name, launch, validation="pass", group="mpi"):
        found = point("allreduce", "native" if name == "native" else "ring", 1024, 10.0, 1.0)
        found = dataclasses.replace(found, launch=launch, validation=validation, group=group)
        return {**dataclasses.asdict(found), "algorithm": name}

    return pd.DataFrame(
        [
            row("native", 1),
            row("native", 1, group="gloo"),  # native beside gloo's threads
            row("ring", 1),
            row("ring", 2, validation="fail"),
            row("native:alg=ring", 1),
        ]
    )


def _kept(frame: pd.DataFrame) -> list[tuple[str, int, str]]:
    return sorted(zip(frame["algorithm"], frame["launch"], frame["group"], strict=True))


def test_decisions_drop_a_candidate_that_ever_failed_and_native_beside_other_threads():
    assert _kept(clean_rows(_frame())) == [("native", 1, "mpi"), ("native:alg=ring", 1, "mpi")]


def test_the_model_keeps_a_candidates_launches_that_validated_without_forced_algorithms():
    kept = clean_rows(_frame(), failed="row", forced_library=False)
    assert _kept(kept) == [("native", 1, "mpi"), ("ring", 1, "mpi")]
