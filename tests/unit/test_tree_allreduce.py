"""The pipelined tree allreduce (collectives/allreduce_tree.py): its trees, its schedule
run on p simulated ranks, its cost formula and its registration."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from collectives import allreduce_tree as tree_module
from collectives.allreduce_tree import busiest_rank, levels, tree_links
from collectives.common import LinkCost, Machine
from collectives.errors import UsageError
from collectives.ops import reduce_op
from collectives.registry import COMMUTATIVE_OP, lookup, parse_variant
from collectives.shape import JobShape

# How long a simulated rank waits for a message before the schedule counts as deadlocked.
DEADLOCK_S = 20.0


def _spans_all_ranks(p: int, tree: int) -> bool:
    """Every rank reaches the root through its parents, and parents and children agree."""
    links = [tree_links(r, p, tree) for r in range(p)]
    for rank, mine in enumerate(links):
        assert all(links[c].parent == rank for c in mine.children)
        seen, node = set(), rank
        while links[node].parent is not None:
            assert node not in seen
            seen.add(node)
            node = links[node].parent
    return sum(link.parent is None for link in links) == 1


@pytest.mark.parametrize("p", range(1, 65))
def test_both_trees_span_every_rank_with_at_most_two_children(p):
    for tree in (0, 1):
        assert _spans_all_ranks(p, tree)
        assert all(len(tree_links(r, p, tree).children) <= 2 for r in range(p))


@pytest.mark.parametrize("p", range(2, 65))
def test_each_rank_is_interior_in_at_most_one_tree_and_a_leaf_in_the_other(p):
    for rank in range(p):
        interior = [bool(tree_links(rank, p, tree).children) for tree in (0, 1)]
        assert interior != [True, True], (p, rank)
    # Half the ranks carry the first tree's interior, the other half the second's.
    assert {r for r in range(p) if tree_links(r, p, 0).children}.isdisjoint(
        {r for r in range(p) if tree_links(r, p, 1).children}
    )


def test_the_first_tree_is_mpich_kary_tree_with_k_2():
    assert tree_links(0, 7, 0).children == (1, 2)
    assert tree_links(2, 7, 0).children == (5, 6)
    assert tree_links(6, 7, 0).parent == 2
    # The second is its mirror: rank p-1 is its root.
    assert tree_links(6, 7, 1).parent is None and tree_links(6, 7, 1).children == (5, 4)


@pytest.mark.parametrize("p", range(1, 65))
def test_a_childs_broadcast_lags_its_parents(p):
    """Deadlock freedom: a child's lag is at least its parent's, so a rank never waits for a
    piece its parent would only send in a later step than the one it is in."""
    for tree in (0, 1):
        for rank in range(p):
            links = tree_links(rank, p, tree)
            for child in links.children:
                assert tree_links(child, p, tree).lag >= links.lag
    assert tree_links(0, p, 0).lag == 0


class _Mailbox:
    """Messages between simulated ranks, matched per (source, dest, tag) in order."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queues: dict[tuple[int, int, int], list] = {}


class _Request:
    """A rendezvous request: a send completes only once its receiver has copied it out
    (the strictest behaviour MPI allows), so a reused send buffer would be caught."""

    def __init__(self, wait) -> None:
        self._wait, self._done = wait, False

    def Wait(self) -> None:  # noqa: N802 (mpi4py's name)
        if not self._done:
            self._wait()
            self._done = True


class _FakeComm:
    """The mpi4py calls the tree uses, for one simulated rank."""

    def __init__(self, box: _Mailbox, rank: int, size: int) -> None:
        self.box, self.rank, self.size = box, rank, size
        self.posted: dict[tuple[int, int], int] = {}

    def Dup(self):  # noqa: N802
        return self

    def Get_rank(self) -> int:  # noqa: N802
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    def _until(self, ready) -> None:
        with self.box.cond:
            if not self.box.cond.wait_for(ready, timeout=DEADLOCK_S):
                raise TimeoutError(f"rank {self.rank}: deadlock")

    def Isend(self, buf, dest: int, tag: int) -> _Request:  # noqa: N802
        message = {"data": buf, "taken": False}
        with self.box.cond:
            self.box.queues.setdefault((self.rank, dest, tag), []).append(message)
            self.box.cond.notify_all()
        return _Request(lambda: self._until(lambda: message["taken"]))

    def Irecv(self, buf, source: int, tag: int) -> _Request:  # noqa: N802
        queue = self.box.queues.setdefault((source, self.rank, tag), [])
        # Receives match sends in posting order (MPI's non-overtaking rule): the slot is
        # taken now, the data when the receive is waited on.
        index = self.posted.get((source, tag), 0)
        self.posted[(source, tag)] = index + 1

        def wait() -> None:
            self._until(lambda: len(queue) > index)
            with self.box.cond:
                message = queue[index]
                buf[...] = message["data"]
                message["taken"] = True
                self.box.cond.notify_all()

        return _Request(wait)

    def Recv(self, buf, source: int, tag: int) -> None:  # noqa: N802
        self.Irecv(buf, source, tag).Wait()


def _waitall(requests) -> None:
    for request in requests:
        request.Wait()


def _simulate(p: int, seg: int, trees: int, n: int, in_place: bool) -> list[np.ndarray]:
    """Run the bound tree on p threads; returns each rank's result."""
    box, results, errors = _Mailbox(), [None] * p, []
    op = reduce_op("sum")

    def rank_main(rank: int) -> None:
        try:
            call = tree_module.tree(_FakeComm(box, rank, p), seg=seg, trees=trees)
            data = np.arange(n, dtype=np.float64) * (rank + 1)
            recv = data if in_place else np.empty_like(data)
            call(None if in_place else data, recv, op, 0)
            results[rank] = recv
        except Exception as exc:  # reported by the main thread
            errors.append(exc)
            with box.cond:
                box.cond.notify_all()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(p)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * DEADLOCK_S)
    assert not errors, errors
    return results


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 7])
@pytest.mark.parametrize("trees", [1, 2])
@pytest.mark.parametrize("seg", [0, 16, 40])
def test_the_schedule_reduces_every_segment_on_every_rank(monkeypatch, p, trees, seg):
    """Real schedule, simulated ranks: many segments (seg bytes of float64), odd ones
    included, each arriving only when its receiver takes it."""
    monkeypatch.setattr(
        tree_module, "mpi", SimpleNamespace(Request=SimpleNamespace(Waitall=_waitall))
    )
    n = 37
    expected = np.arange(n, dtype=np.float64) * (p * (p + 1) // 2)
    for in_place in (False, True):
        results = _simulate(p, seg, trees, n, in_place)
        for rank, got in enumerate(results):
            np.testing.assert_array_equal(got, expected, err_msg=f"rank {rank}")


def _parts(p: int, n: int, seg: int, trees: int) -> tuple[float, float]:
    """The formula's per-message part and per-byte part (alpha only, beta and gamma only)."""
    cost = lookup("allreduce", "tree").cost
    latency = Machine(LinkCost(1.0, 0.0, 0.0), LinkCost(1.0, 0.0, 0.0), ppn=p)
    data = Machine(LinkCost(0.0, 1.0, 1.0), LinkCost(0.0, 1.0, 1.0), ppn=p)
    return cost(latency, p, n, seg=seg, trees=trees), cost(data, p, n, seg=seg, trees=trees)


def test_the_latency_term_grows_with_lg_p_and_the_segments():
    n, seg = 64 << 20, 1 << 20
    by_p = [_parts(p, n, seg, 1)[0] for p in (2, 4, 16, 64, 1024)]
    assert by_p == sorted(by_p) and len(set(by_p)) == len(by_p)
    # Fill: 2 levels(p) x 2 children messages; each further segment: the busiest rank's 3.
    assert _parts(1024, n, seg, 1)[0] - _parts(64, n, seg, 1)[0] == 2 * 2 * (10 - 6)
    by_seg = [_parts(16, n, s, 1)[0] for s in (0, 4 << 20, 1 << 20, 64 << 10)]
    assert by_seg == sorted(by_seg) and len(set(by_seg)) == 4


def test_the_pipelined_double_trees_bandwidth_term_stays_flat_in_p():
    n, seg = 256 << 20, 4 << 10  # many segments: the fill is negligible
    double = [_parts(p, n, seg, 2)[1] for p in (8, 64, 1024)]
    assert max(double) / min(double) < 1.01
    # 2 n beta + n gamma, the ring's, against the single tree's 3 n beta + 2 n gamma.
    assert double[-1] == pytest.approx(3 * n + n, rel=0.01)  # + the copy-in n beta
    assert _parts(1024, n, seg, 1)[1] == pytest.approx(5 * n + n, rel=0.01)
    # Unpipelined, the whole message crosses every level: it grows with lg p.
    whole = [_parts(p, n, 0, 2)[1] for p in (8, 64, 1024)]
    assert whole == sorted(whole) and whole[-1] > 2 * whole[0]


def test_two_ranks_on_two_trees_cost_what_the_ring_costs():
    """At p = 2 the double tree is a reduce-scatter + allgather of two halves."""
    link = LinkCost(3e-6, 2e-10, 7e-11)
    machine = Machine(link, link, ppn=2)
    ring = lookup("allreduce", "ring").cost(machine, 2, 1 << 20, seg=0)
    assert lookup("allreduce", "tree").cost(machine, 2, 1 << 20, seg=0, trees=2) == pytest.approx(
        ring
    )


@pytest.mark.parametrize("p", range(1, 70))
def test_the_busiest_rank_is_found_among_all_ranks(p):
    for trees in (1, 2):
        loads = [[tree_links(r, p, t) for t in range(trees)] for r in range(p)]
        sends = max(sum(len(t.children) + (t.parent is not None) for t in ls) for ls in loads)
        reductions = max(sum(len(t.children) for t in ls) for ls in loads)
        assert busiest_rank(p, trees) == (sends, reductions)


def test_busiest_rank_counts():
    assert busiest_rank(1, 1) == (0, 0)
    assert busiest_rank(2, 1) == (1, 1)
    assert busiest_rank(4, 1) == (2, 2)
    assert busiest_rank(64, 1) == (3, 2) and busiest_rank(64, 2) == (4, 2)
    assert [levels(p) for p in (1, 2, 3, 4, 7, 8)] == [0, 1, 1, 2, 2, 3]


def test_the_model_costs_every_grid_variant():
    from osu_dl_bench.model.costs import predict_seconds
    from osu_dl_bench.model.platform import Platform, simple_link

    link = simple_link(2e-6, 1e-10, 5e-11)
    platform = Platform("test", link, simple_link(10e-6, 1e-9, 5e-11), None, 1e-6, True)
    for variant in lookup("allreduce", "tree").grid_variants():
        seconds = predict_seconds(platform, "allreduce", variant, JobShape(6), 4 << 20)
        assert seconds is not None and seconds > 0


def test_registration_parameters_and_constraints():
    algo = lookup("allreduce", "tree")
    assert COMMUTATIVE_OP in algo.requires
    assert set(algo.grid["trees"]) == {1, 2} and 0 in algo.grid["seg"]
    assert parse_variant("allreduce", "tree:trees=2,seg=64K").label == "tree:seg=64K,trees=2"
    with pytest.raises(UsageError, match="trees expects 1 or 2, got 3"):
        parse_variant("allreduce", "tree:trees=3")
    mpich = algo.equivalents["mpich"]
    assert mpich.name == "MPIR_Allreduce_intra_tree" and not mpich.exported
    assert dict(mpich.params) == {"seg": 0, "trees": 1}


def test_a_segment_as_large_as_the_message_is_a_twin_of_seg_0():
    whole, big = parse_variant("allreduce", "tree:seg=0"), parse_variant("allreduce", "tree:seg=1M")
    count = (1 << 20) // 4
    assert whole.twin_key(4, count, 4) == big.twin_key(4, count, 4)
    assert whole.twin_key(4, 2 * count, 4) != big.twin_key(4, 2 * count, 4)
    two = parse_variant("allreduce", "tree:seg=1M,trees=2")
    assert two.twin_key(4, count, 4) != big.twin_key(4, count, 4)
