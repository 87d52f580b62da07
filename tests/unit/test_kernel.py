"""The measuring kernel in one process (COMM_SELF): inputs, reset, validation, binding,
the timed loop and the order in which both modes call the candidates."""

from dataclasses import dataclass, field

import numpy as np
import pytest
from mpi4py import MPI

from collectives import SPECS
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.registry import BoundCalls
from osu_dl_bench.measurement import kernel
from osu_dl_bench.measurement.schedule import MAX_ROUNDS, MIN_ROUNDS, rotation

COMM = MPI.COMM_SELF
FLOAT32, INT32, SUM = element_type("float32"), element_type("int32"), reduce_op("sum")


def allreduce_inputs(n: int = 7, etype=FLOAT32) -> kernel.Inputs:
    return kernel.prepare_inputs(COMM, SPECS["allreduce"], etype, SUM, np, n)


def copy_send(send, recv, op, root) -> None:
    """A correct allreduce on one rank."""
    recv[...] = send


def do_nothing(send, recv, op, root) -> None:
    """A wrong allreduce: the output stays zero."""


def scribble_send(send, recv, op, root) -> None:
    """A correct result that destroys its input (a later candidate must not see it)."""
    recv[...] = send
    send[...] = 99


@dataclass
class Log:
    """Calls that record (candidate, root) in the order they ran."""

    events: list[tuple[str, int]] = field(default_factory=list)

    def call(self, name: str):
        def run(send, recv, op, root) -> None:
            self.events.append((name, root))
            recv[...] = send

        return run


def test_count_wrong_is_exact_for_integers_and_relative_for_floats():
    want = np.array([1, 2, 3, 4])
    assert kernel.count_wrong(np.array([1, 2, 3, 5], np.int32), want, INT32) == 1
    close = want * (1 + FLOAT32.rtol / 2)
    far = want * (1 + FLOAT32.rtol * 4)
    assert kernel.count_wrong(close.astype(np.float32), want, FLOAT32) == 0
    assert kernel.count_wrong(far.astype(np.float32), want, FLOAT32) == 4


def test_reset_restores_fresh_inputs_and_zero_outputs():
    inputs = allreduce_inputs()
    fresh = allreduce_inputs()
    scribble_send(inputs.bufs.send, inputs.bufs.recv, SUM, 0)
    inputs.reset()
    np.testing.assert_array_equal(inputs.bufs.send, fresh.bufs.send)
    np.testing.assert_array_equal(inputs.bufs.recv, np.zeros_like(fresh.bufs.recv))
    assert inputs.bufs.send.any()


def test_unchecked_inputs_keep_no_copy_and_cannot_be_reset():
    inputs = kernel.prepare_inputs(COMM, SPECS["allreduce"], FLOAT32, SUM, np, 7, checked=False)
    assert inputs.pristine is None
    with pytest.raises(ValueError, match="checked=False"):
        inputs.reset()


def test_validate_counts_each_candidates_wrong_elements_on_restored_inputs():
    inputs = allreduce_inputs(n=9)
    # scribble_send ruins the shared send buffer; the next candidate still gets fresh inputs.
    wrong = kernel.validate(COMM, [scribble_send, copy_send, do_nothing], inputs)
    assert wrong == [0, 0, int(np.count_nonzero(inputs.expected()))]
    assert wrong[2] > 0


def test_injected_corruption_is_one_wrong_element(monkeypatch):
    monkeypatch.setenv(kernel.FAULT_ENV, "corrupt")
    assert kernel.validate(COMM, [copy_send], allreduce_inputs()) == [1]


def test_validation_at_other_roots_lays_the_inputs_out_again():
    spec = SPECS["bcast"]
    inputs = kernel.prepare_inputs(COMM, spec, FLOAT32, None, np, 5, root=0)
    assert inputs.at_root(0) is inputs
    assert inputs.at_root(1).shape.root == 1
    np.testing.assert_array_equal(inputs.at_root(1).bufs.recv, 0)  # not the root's data


def test_wrong_elements_are_summed_over_the_checked_roots():
    inputs = allreduce_inputs()
    once = kernel.validate(COMM, [do_nothing], inputs)[0]
    assert kernel.validate_at_roots(COMM, [do_nothing, copy_send], inputs, [0, 0]) == [2 * once, 0]


def test_binder_binds_each_variant_once():
    @dataclass(frozen=True)
    class Algorithm:
        collective: str

    @dataclass
    class FakeVariant:
        label: str
        algorithm: Algorithm = Algorithm("allreduce")
        binds: int = 0

        def bind(self, comm):
            self.binds += 1
            return lambda send, recv, op, root: self.label

    a, b = FakeVariant("a"), FakeVariant("b")
    binder = BoundCalls()
    first = binder.calls(COMM, [a, b])
    second = binder.calls(COMM, [b, a])
    assert (a.binds, b.binds) == (1, 1)
    assert second == first[::-1]


def test_timed_round_calls_in_order_after_a_barrier_each_and_fills_its_cells():
    log, barriers = Log(), []
    inputs = allreduce_inputs()
    times = np.full((2, 3), -1.0)
    calls = [log.call("A"), log.call("B")]
    kernel.timed_round(
        lambda: barriers.append(1), calls, [1, 0], inputs.bufs, SUM, [0, 2, 1], times
    )
    assert log.events == [("B", 0), ("B", 2), ("B", 1), ("A", 0), ("A", 2), ("A", 1)]
    assert len(barriers) == 6
    assert (times >= 0).all()


def test_an_interleaved_round_calls_every_candidate_once_per_root():
    log = Log()
    inputs = allreduce_inputs()
    times = np.full((2, 2), -1.0)
    calls = [log.call("A"), log.call("B")]
    kernel.timed_round(lambda: None, calls, [1, 0], inputs.bufs, SUM, [3, 4], times, True)
    assert log.events == [("B", 3), ("A", 3), ("B", 4), ("A", 4)]
    assert (times >= 0).all()


def test_osu_mode_interleaves_candidates_every_iteration():
    log = Log()
    inputs = allreduce_inputs()
    timing = kernel.measure_osu(
        COMM, [log.call("A"), log.call("B")], inputs, [0], [0, 1, 2], check_roots=None
    )
    assert log.events == [("A", 0), ("B", 0)] + [(c, r) for r in (0, 1, 2) for c in "AB"]
    assert [len(s.iter_max_us) for s in timing.stats] == [3, 3]
    assert timing.wrong is None


def test_osu_mode_one_candidate_runs_every_root_once_then_checks():
    log = Log()
    timing = kernel.measure_osu(COMM, [log.call("A")], allreduce_inputs(), [0, 0], [0] * 5, [0])
    assert log.events == [("A", 0)] * 8  # 2 warm-up, 5 timed, 1 check
    assert timing.wrong == [0]


def test_osu_stats_on_one_rank_are_that_ranks_mean_and_percentiles():
    times = np.array([1e-6, 2e-6, 3e-6, 10e-6])
    stats = kernel.osu_stats(COMM, times)
    assert stats.avg_us == stats.min_us == stats.max_us == pytest.approx(4.0)
    assert stats.p50_us == pytest.approx(2.5)
    assert stats.iter_max_us == (1.0, 2.0, 3.0, 10.0)


def test_budget_mode_checks_then_times_rotated_rounds_within_its_bounds():
    log = Log()
    calls = [log.call("A"), log.call("B"), log.call("C")]
    timing = kernel.measure_budget(COMM, calls, allreduce_inputs(), budget=0.01)
    rounds, iterations = timing.schedule.rounds, timing.schedule.iterations
    assert MIN_ROUNDS <= rounds <= MAX_ROUNDS
    assert timing.times.shape == (rounds, 3, iterations)
    assert timing.wrong == [0, 0, 0]
    assert log.events[:3] == [("A", 0), ("B", 0), ("C", 0)]  # the check comes first
    tail = [name for name, _ in log.events[-rounds * 3 * iterations :]]
    for r in range(rounds):
        block = tail[r * 3 * iterations : (r + 1) * 3 * iterations]
        assert block[::iterations] == ["ABC"[j] for j in rotation(r, 3)]


def test_the_delay_hook_sleeps_at_most_its_total_however_many_calls(monkeypatch):
    slept = []
    monkeypatch.setattr(kernel.time, "sleep", slept.append)
    monkeypatch.setattr(kernel._DelayBudget, "left", kernel.MAX_DELAY_TOTAL)
    log, inputs = Log(), allreduce_inputs()
    times = np.zeros((1, 10))
    for _ in range(3):  # three rounds of ten calls at 1 s each: 30 s asked
        kernel.timed_round(
            lambda: None, [log.call("A")], [0], inputs.bufs, SUM, [0] * 10, times, delay=1.0
        )
    assert sum(slept) == kernel.MAX_DELAY_TOTAL
    assert len(log.events) == 30


def test_a_delay_over_the_total_is_refused(monkeypatch):
    monkeypatch.setenv(kernel.DELAY_ENV, f"0:{kernel.MAX_DELAY_TOTAL + 0.01}")
    with pytest.raises(kernel.UsageError, match="slept at most"):
        kernel.delay_for(COMM)
    monkeypatch.setenv(kernel.DELAY_ENV, "0:0.004")
    assert kernel.delay_for(COMM) == 0.004
