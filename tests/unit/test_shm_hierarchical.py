"""The shared-memory (shm, and cma where the kernel allows it) and hierarchical algorithms
equal the expected result on p = 1..6, on one node and on emulated nodes of 1, 2 and 3
ranks (real mpiexec, hard timeouts)."""

import pytest

from collectives import hierarchical, shm
from collectives.common import LinkCost, Machine
from osu_dl_bench.errors import UsageError

MACHINE = Machine(LinkCost(1e-6, 1e-10, 1e-10), LinkCost(5e-6, 1e-9, 1e-10), ppn=4)


@pytest.mark.parametrize(
    ("collective", "name", "why"),
    [
        ("allreduce", "nosuch", "is not a registered allreduce algorithm"),
        ("allreduce", "shm", "runs within one node only"),
        ("bcast", "hierarchical", "is itself hierarchical"),
    ],
)
def test_inner_must_be_a_flat_registered_algorithm(collective, name, why):
    with pytest.raises(UsageError, match=why) as info:
        hierarchical.resolve_inner(collective, name)
    assert "shm" not in str(info.value).split("expected one of")[1]


def test_costs_grow_with_size_and_add_the_leaders_step():
    small, large = 1 << 10, 1 << 24
    for cost in (shm.allreduce_cost, shm.bcast_cost):
        assert 0 < cost(MACHINE, 4, small) < cost(MACHINE, 4, large)
    for cost in (hierarchical.allreduce_cost, hierarchical.bcast_cost):
        one_node, two_nodes = cost(MACHINE, 4, large), cost(MACHINE, 8, large)
        assert 0 < one_node < two_nodes
    assert hierarchical.allreduce_cost(MACHINE, 4, large) == shm.allreduce_cost(MACHINE, 4, large)


def test_inner_allreduce_among_leaders_pays_no_out_of_place_copy():
    # The leaders run inner in place: the ring's cost among 4 leaders is its textbook
    # formula on the inter-node link, with no n beta copy of the input into the output.
    link, p, n = MACHINE.inter, 4, 1 << 20
    ring = 2 * (p - 1) * link.alpha + (p - 1) / p * n * (2 * link.beta + link.gamma)
    args = ("allreduce", "ring", MACHINE, p, n, hierarchical._mpich_allreduce)
    assert hierarchical._inner_cost(*args) == pytest.approx(ring)
