"""Partial pooling of a candidate's ratio across process counts (selection.pooling)."""

import math

import numpy as np
import pytest
from support.tuning import launch_rows, machine_states, scaled, write_run

from osu_dl_bench.selection.paired import Z_LEVEL, Ratio
from osu_dl_bench.selection.pooling import POOLED, between_counts, shrink
from osu_dl_bench.selection.tune import run_decisions

SIZES = [1024 << (2 * k) for k in range(6)]  # 1 KiB .. 1 MiB


def _ratio(log_mean: float, sd: float, evidence: str = "curve") -> Ratio:
    half = Z_LEVEL * sd
    centre = math.exp(log_mean)
    return Ratio(centre, centre * math.exp(-half), centre * math.exp(half), 3, 60, evidence)


def test_a_candidate_equal_at_every_count_borrows_strength():
    ratios = [_ratio(math.log(0.8) + e, 0.1) for e in (0.02, -0.03, 0.01)]
    pooled = shrink(ratios)
    for before, after in zip(ratios, pooled, strict=True):
        assert after.evidence == POOLED
        assert after.log_sd < 0.75 * before.log_sd
        assert after.low < 0.8 < after.high


def test_counts_that_differ_beyond_their_noise_keep_their_own_estimates():
    ratios = [_ratio(math.log(0.5), 0.05), _ratio(math.log(1.5), 0.05), _ratio(0.0, 0.05)]
    pooled = shrink(ratios)
    assert between_counts(np.log([r.ratio for r in ratios]), np.array([0.05**2] * 3)).variance > 0.1
    for before, after in zip(ratios, pooled, strict=True):
        assert after.ratio == pytest.approx(before.ratio, rel=0.02)


def test_a_null_like_candidate_is_shrunk_to_one():
    rng = np.random.default_rng(3)
    moved = []
    for _ in range(200):
        ratios = [_ratio(float(rng.normal(0, 0.08)), 0.08) for _ in range(3)]
        pooled = shrink(ratios)
        moved.append(
            np.mean([abs(math.log(p.ratio)) for p in pooled])
            / np.mean([abs(math.log(r.ratio)) for r in ratios])
        )
    assert np.median(moved) < 0.7


@pytest.mark.parametrize("counts", [2, 3, 4])
def test_pooled_intervals_cover_the_truth_about_as_often_as_they_claim(counts):
    """True log-ratios spread over the counts by 0 to 3 standard errors: the posterior
    intervals (with the uncertainty of the between-count variance) cover at 90-99%."""
    rng = np.random.default_rng(counts)
    covered = total = 0
    for spread in (0.0, 0.05, 0.1, 0.2, 0.3):
        for _ in range(400):
            truth = np.linspace(-spread / 2, spread / 2, counts)
            sds = 0.1 * rng.uniform(0.7, 1.4, counts)
            ratios = [
                _ratio(float(t + rng.normal(0, s)), float(s))
                for t, s in zip(truth, sds, strict=True)
            ]
            for t, p in zip(truth, shrink(ratios), strict=True):
                covered += p.low <= math.exp(t) <= p.high
                total += 1
    assert 0.90 <= covered / total <= 0.99


def _two_count_run(path, factors: dict[int, float], seed: int = 0):
    """ring:seg=1M against native at SIZES, at the process counts of ``factors``."""
    rows = []
    for nprocs, factor in factors.items():
        for offset, size in enumerate(SIZES):
            states = machine_states(launches=3, rounds=20, seed=seed + offset + 10 * nprocs)
            rows += launch_rows("allreduce", "native", size, states, nprocs=nprocs)
            times = scaled(states, factor, jitter=0.05, seed=seed + 7 * offset + nprocs)
            rows += launch_rows("allreduce", "ring:seg=1M", size, times, nprocs=nprocs)
    return write_run(path, rows)


def test_decisions_pool_a_candidate_across_process_counts(tmp_path):
    run = _two_count_run(tmp_path / "two", {2: 0.8, 4: 0.8})
    decisions, _ = run_decisions(run)
    evidence = {p.candidates["ring:seg=1M"].ratio.evidence for p in decisions.values()}
    assert evidence == {POOLED}


def test_a_single_process_count_is_left_as_it_was(tmp_path):
    run = _two_count_run(tmp_path / "one", {2: 0.8})
    decisions, _ = run_decisions(run)
    evidence = {p.candidates["ring:seg=1M"].ratio.evidence for p in decisions.values()}
    assert POOLED not in evidence
