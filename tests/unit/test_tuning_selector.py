"""The runtime selector: table lookups, nearest entries, the model hook, eligibility,
forcing, explain(), per-call binding and the bench's 'tuned' variant (one process)."""

import dataclasses

import numpy as np
import pytest
from mpi4py import MPI
from support.tuning import (
    label,
    make_entry,
    make_table,
)

from collectives import SPECS, Algorithm, CallContext, CallShape
from collectives import registry as _registry
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.registry import POWER_OF_TWO
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection import FORCE_ENV, Choice, Query, Selector, parse_force
from osu_dl_bench.selection.selector import message_bytes, parse_bench_algorithms

pytestmark = pytest.mark.usefixtures("registered")
NATIVE = Choice("mpi", "native")


def _choice(collective, name):
    return Choice.of(_registry.parse_variant(collective, name))


_entry, _table = make_entry, make_table


@pytest.fixture
def selector(monkeypatch):
    monkeypatch.delenv(FORCE_ENV, raising=False)
    table = _table(
        _entry(2, [(0, "native"), (4096, "recursive_doubling"), (1 << 20, "ring")]),
        _entry(8, [(0, "rabenseifner")]),
    )
    return Selector(table)


def _q(nprocs, nbytes, collective="allreduce", **kw):
    return Query(collective, nprocs, nbytes, **kw)


def test_exact_entry_bisects_the_ranges(selector):
    picks = {n: selector.decide(_q(2, n)) for n in (8, 4095, 4096, (1 << 20) - 1, 1 << 20)}
    assert [d.label for d in picks.values()] == [
        "native",
        "native",
        label("allreduce", "recursive_doubling"),
        label("allreduce", "recursive_doubling"),
        label("allreduce", "ring"),
    ]
    assert all(d.how == "table" for d in picks.values())
    beyond = selector.decide(_q(2, 1 << 30))
    assert beyond.label == label("allreduce", "ring") and "outside the measured" in beyond.reason
    below = selector.decide(_q(2, 1))
    assert below.label == "native" and "outside the measured" in below.reason


@pytest.mark.parametrize("nprocs,expected", [(1, 2), (3, 2), (5, 2), (6, 8), (64, 8)])
def test_outside_the_comm_sizes_the_nearest_entry_serves(selector, nprocs, expected):
    decision = selector.decide(_q(nprocs, 1 << 22))
    assert decision.entry.key.nprocs == expected  # p=5: tie between 2 and 8 -> smaller
    assert decision.how == "nearest"


def test_nearest_prefers_same_nodes_then_ppn():
    sel = Selector(
        _table(
            _entry(8, [(0, "ring")], nodes=2, ppn=4),
            _entry(8, [(0, "rabenseifner")], nodes=1, ppn=8),
        ),
        force={},
    )
    assert sel.decide(_q(8, 64, nodes=2, ppn=4)).how == "table"
    assert sel.decide(_q(8, 64, nodes=2, ppn=4)).label == label("allreduce", "ring")
    assert sel.decide(_q(8, 64, nodes=1)).label == "rabenseifner"
    assert sel.decide(_q(16, 64, nodes=2, ppn=8)).entry.key.nodes == 2


def test_the_model_hook_answers_only_outside_the_table(selector):
    asked = []

    def model(query):
        asked.append(query)
        return _choice("allreduce", "ring")

    sel = Selector(selector.table, force={}, model=model)
    assert sel.decide(_q(2, 8)).how == "table" and not asked
    decision = sel.decide(_q(5, 8))
    assert decision.how == "model" and decision.label == label("allreduce", "ring")
    assert asked[0].nprocs == 5


def test_no_table_or_no_entry_means_native(selector, monkeypatch):
    monkeypatch.delenv(FORCE_ENV, raising=False)
    bare = Selector().decide(_q(4, 1024))
    assert (bare.label, bare.how, bare.reason) == ("native", "native", "no table")
    missing = selector.decide(_q(2, 1024, collective="bcast"))
    assert missing.label == "native" and "no entry for bcast on cpu" in missing.reason
    gpu = selector.decide(_q(2, 1024, device="cuda"))
    assert gpu.label == "native" and "cuda" in gpu.reason


def test_registered_buffers_take_the_host_entries(selector, monkeypatch):
    """A table measured on private host memory answers for registered host memory."""
    monkeypatch.delenv(FORCE_ENV, raising=False)
    for size in (8, 1024, 1 << 20):
        host = selector.decide(_q(2, size))
        on_registered = selector.decide(_q(2, size, device="cpu-registered"))
        assert (on_registered.label, on_registered.how) == (host.label, host.how)
        assert on_registered.entry is host.entry


def test_an_ineligible_choice_falls_back_to_native(monkeypatch):
    native = _registry.lookup("allreduce", "native")
    picky = Algorithm("allreduce", "pow2only", native.factory, requires=(POWER_OF_TWO,))
    monkeypatch.setitem(_registry._REGISTRY, ("allreduce", "pow2only"), picky)
    sel = Selector(_table(_entry(4, [(0, "pow2only")])), force={})
    assert sel.decide(_q(4, 64)).label == "pow2only"
    odd = sel.decide(_q(3, 64))
    assert odd.label == "native" and "needs a power-of-two process count" in odd.reason
    # A non-commutative context rules out ring (and any algorithm that needs one).
    ring_table = Selector(_table(_entry(2, [(0, "ring")])), force={})
    ctx = CallContext(2, element_type("float32"), _non_commutative(), "cpu", 1, 2)
    if _registry.lookup("allreduce", "ring").requires:
        assert ring_table.decide(_q(2, 64), ctx).label == "native"


def _non_commutative():
    return dataclasses.replace(reduce_op("sum"), name="noncomm", commutative=False)


def test_forcing_by_environment_beats_the_table(selector, monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "allreduce=ring,bcast=chain:seg=64K")
    sel = Selector(selector.table)
    forced = sel.decide(_q(2, 8))
    assert forced.how == "forced" and forced.label == label("allreduce", "ring")
    assert sel.decide(_q(2, 8, collective="bcast")).label == "chain:seg=64K"
    assert "forced by OSU_DL_BENCH_FORCE_ALGORITHM" in sel.explain(_q(2, 8))
    # An explicit force= replaces the environment's.
    assert Selector(selector.table, force={}).decide(_q(2, 8)).how == "table"


def test_force_parsing_and_errors(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "bcast=nosuch")
    with pytest.raises(UsageError, match=f"{FORCE_ENV}: unknown algorithm 'nosuch' for bcast"):
        Selector()
    assert parse_force("allreduce=ring, bcast=chain:seg=256K,reduce=native") == {
        "allreduce": "ring",
        "bcast": "chain:seg=256K",
        "reduce": "native",
    }
    with pytest.raises(UsageError, match="bad item 'ring'"):
        parse_force("ring")
    with pytest.raises(UsageError, match="the caller: unknown algorithm 'nosuch'"):
        Selector(force={"allreduce": "nosuch"})


def test_explain_says_what_and_why(selector):
    text = selector.explain(_q(3, 1 << 21))
    assert "source: table mem.json" in text
    assert "how: nearest: nearest entry allreduce on cpu, p=2" in text
    assert text.rstrip().endswith(f"=> {label('allreduce', 'ring')} (mpi)")


def _with_points(*points):
    entry = _entry(2, [(0, "native"), (4096, "ring")])
    return Selector(_table(dataclasses.replace(entry, points=points)), force={})


def test_explain_gives_the_tie_set_and_the_interval_where_the_table_has_them():
    ring = label("allreduce", "ring")
    measured = {"size_bytes": 1 << 20, "chosen": ring, "median_us": 71.0}
    measured |= {"native_median_us": 100.0, "speedup": 1.4085, "reason": "its interval"}
    measured |= {"ratio": 0.71, "ratio_low": 0.66, "ratio_high": 0.78, "launches": 3}
    measured |= {"tie_set": [ring, "rabenseifner"], "rounds": 120}
    text = _with_points(measured).explain(_q(2, 1 << 20))
    assert (
        f"measured: at 1M: {ring} (tie set: {ring}, rabenseifner; 0.71x native, "
        "95% CI 0.66-0.78, 3 launches x 40 rounds), 71.00 us vs native 100.00 us (1.41x); "
        "its interval"
    ) in text
    # A table from before launches: no tie set, no interval, the old line.
    old = {"size_bytes": 8, "chosen": "native", "median_us": 2.0, "reason": "no candidate"}
    text = _with_points(old | {"native_median_us": 2.0, "speedup": 1.0}).explain(_q(2, 8))
    assert "measured: at 8: native 2.00 us vs native 2.00 us (1.00x); no candidate" in text


@pytest.mark.parametrize("collective", list(SPECS))
@pytest.mark.parametrize("nprocs", [1, 3, 4])
def test_message_bytes_recovers_the_per_rank_size_from_any_buffers(collective, nprocs):
    spec, size_of = SPECS[collective], message_bytes(collective, nprocs)
    for rank in range(nprocs):
        for in_place in (False, True):
            shape = CallShape(5, nprocs, rank, 0, in_place)
            bufs = spec.allocate(np, np.dtype(np.float64), shape)
            expected = 0 if collective == "barrier" else 5 * 8
            assert size_of(bufs.send, bufs.recv) == expected, (rank, in_place)


def _recording(monkeypatch, calls, *names):
    native = _registry.lookup("allreduce", "native")
    for name in names:

        def factory(comm, _name=name):
            inner = native.factory(comm)

            def call(send, recv, op, root):
                calls.append((_name, recv.nbytes))
                inner(send, recv, op, root)

            return call

        algo = Algorithm("allreduce", name, factory)
        monkeypatch.setitem(_registry._REGISTRY, ("allreduce", name), algo)


def test_bound_calls_route_by_size_and_are_cached_per_communicator(monkeypatch):
    calls = []
    _recording(monkeypatch, calls, "small_one", "large_one")
    sel = Selector(_table(_entry(1, [(0, "small_one"), (1024, "large_one")])), force={})
    ctx = CallContext(1, element_type("float32"), reduce_op("sum"))
    call = sel.bind(MPI.COMM_SELF, "allreduce", ctx)
    assert sel.bind(MPI.COMM_SELF, "allreduce", ctx) is call
    for n in (1, 255, 256, 4096):
        send = np.ones(n, np.float32)
        recv = np.zeros(n, np.float32)
        call(send, recv, reduce_op("sum"), 0)
        assert (recv == 1).all()
    assert calls == [
        ("small_one", 4),
        ("small_one", 1020),
        ("large_one", 1024),
        ("large_one", 16384),
    ]


def test_the_tuned_variant_is_an_ordinary_variant(monkeypatch, selector):
    calls = []
    _recording(monkeypatch, calls, "only_one")
    sel = Selector(_table(_entry(1, [(0, "only_one")])), force={})
    ctx = CallContext(1, element_type("float32"), reduce_op("sum"))
    variant = sel.variant("allreduce", ctx)
    assert variant.label == "tuned" and variant.algorithm.backend == "selector"
    assert variant.ineligible_reason(ctx) is None
    call = variant.bind(MPI.COMM_SELF)
    recv = np.zeros(3, np.float32)
    call(np.ones(3, np.float32), recv, reduce_op("sum"), 0)
    assert calls == [("only_one", 12)] and (recv == 1).all()
    made = parse_bench_algorithms("bcast", "native,tuned,chain:seg=64K,binomial", lambda: variant)
    assert [v.label for v in made] == ["native", "tuned", "chain:seg=64K", "binomial"]


def test_the_chain_is_forced_then_fixed_then_table(selector):
    ring = _registry.parse_variant("allreduce", "ring")
    fixed = selector.with_fixed({"allreduce": ring})
    assert fixed.decide(_q(2, 8)).how == "fixed" and fixed.decide(_q(2, 8)).label == ring.label
    assert selector.decide(_q(2, 8)).how == "table", "with_fixed must not change the original"
    forced = Selector(selector.table, force={"allreduce": "recursive_doubling"}).with_fixed(
        {"allreduce": ring}
    )
    assert forced.decide(_q(2, 8)).how == "forced"
    assert fixed.decide(_q(2, 8, collective="bcast")).how == "native"  # not fixed: the table's


def test_a_fixed_algorithm_that_cannot_run_here_is_an_error_not_native(selector):
    rabenseifner = _registry.parse_variant("allreduce", "rabenseifner")
    fixed = selector.with_fixed({"allreduce": rabenseifner})
    ctx = CallContext(2, element_type("float32"), _non_commutative(), "cpu", 1, 2)
    with pytest.raises(UsageError, match="--allreduce rabenseifner cannot run here"):
        fixed.decide(_q(2, 8), ctx)


def test_each_variant_is_bound_once_per_communicator(selector, monkeypatch):
    bound = []
    native = _registry.lookup("allreduce", "native")

    def counting_factory(comm):
        bound.append(comm)
        return native.factory(comm)

    monkeypatch.setitem(
        _registry._REGISTRY,
        ("allreduce", "counted"),
        Algorithm("allreduce", "counted", counting_factory),
    )
    counted = _registry.parse_variant("allreduce", "counted")
    comm = MPI.COMM_SELF
    assert selector.calls.get(comm, counted) is selector.calls.get(comm, counted)
    ctx = CallContext(1, element_type("float32"), reduce_op("sum"), "cpu", 1, 1)
    selector.with_fixed({"allreduce": counted}).bind(comm, "allreduce", ctx)
    assert len(bound) == 1, "the fixed selector shares its parent's bound calls"
