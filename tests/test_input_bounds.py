"""Hostile input is refused with a usage error naming what was expected: algorithm
parameters (wherever a variant is named), table and platform files, bench options, and
the clean command's choice of stale shared-memory segments."""

import pytest

from osu_dl_bench.collectives import algorithms, all_algorithms, lookup
from osu_dl_bench.collectives.registry import Algorithm, Split, parse_variant, whole_message
from osu_dl_bench.errors import UsageError
from osu_dl_bench.tuning.selector import Selector

# --- algorithm parameters -----------------------------------------------------------------


def test_a_size_parameter_given_a_word_names_the_parameter_and_an_example():
    with pytest.raises(UsageError) as info:
        parse_variant("allreduce", "ring:seg=abc")
    assert str(info.value) == "ring: seg expects a size such as 256K, got 'abc'"


@pytest.mark.parametrize(
    "collective,text",
    [
        ("allreduce", "cma:chunk=1"),
        ("allreduce", "cma:chunk=2G"),
        ("allreduce", "shm:chunk=3"),
        ("bcast", "shm:chunk=4095"),
        ("bcast", "chain:seg=1"),
        ("allreduce", "ring:seg=1"),
        ("allreduce", "ring:seg=99999999999999999999G"),
    ],
)
def test_chunk_and_segment_sizes_outside_4k_to_1g_are_refused(collective, text):
    with pytest.raises(UsageError, match=r"expects .*a size from 4K to 1G, got"):
        parse_variant(collective, text)


@pytest.mark.parametrize(
    "collective,text",
    [("allreduce", "cma:chunk=4K"), ("bcast", "chain:seg=1G"), ("allreduce", "ring:seg=0")],
)
def test_the_bounds_themselves_and_the_rings_whole_blocks_are_accepted(collective, text):
    assert parse_variant(collective, text).label == text


@pytest.mark.parametrize("value", ["512K", True, 1.5, -4096, None])
def test_a_table_value_of_the_wrong_kind_is_refused(value):
    with pytest.raises(UsageError, match="cma: chunk expects a whole number of bytes"):
        lookup("allreduce", "cma").variant(chunk=value)


@pytest.mark.parametrize("value", [5, "", None])
def test_an_inner_algorithm_must_be_a_name(value):
    with pytest.raises(UsageError, match="hierarchical: inner expects an algorithm name"):
        lookup("allreduce", "hierarchical").variant(inner=value)


def test_the_selector_forcing_checks_the_same_bounds():
    with pytest.raises(UsageError, match="cma: chunk expects .* from 4K to 1G, got 1"):
        Selector(force={"allreduce": "cma:chunk=1"})


def test_every_registered_default_and_grid_value_is_within_its_bounds():
    for algo in all_algorithms():
        for variant in [algo.variant(), *algo.grid_variants()]:
            assert variant.params.keys() == algo.defaults.keys()
    assert {a.name for a in algorithms("allreduce")} >= {"ring", "cma", "shm"}


def test_a_registration_whose_grid_breaks_its_bounds_fails_at_once():
    with pytest.raises(ValueError, match="chunk expects a size from 4K to 1G, got 1"):
        Algorithm(
            "bcast",
            "tiny",
            factory=lambda comm, chunk: None,
            defaults={"chunk": 4096},
            grid={"chunk": (1, 4096)},
            split=Split("chunk", whole_message),
        )
