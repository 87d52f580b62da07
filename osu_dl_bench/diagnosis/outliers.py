"""Which unit (a rank, a node, a link) is worse than its peers beyond the run's own spread.

Each unit brings its samples (a rank's arrival lag per iteration, a link's bandwidth per
repetition). A unit is compared with its peers, the pooled samples of every other unit
(leave-one-out, so that one bad unit cannot hide in the reference it is judged by):

- the estimate is the ratio and the difference of the two medians; their 95% intervals
  come from a percentile bootstrap of the medians (stats.bootstrap), the unit's and the
  peers' samples resampled apart;
- the run's own spread is how far the peers' medians lie from one another: three robust
  standard deviations of them (stats.robust: scaled median absolute deviations; Leys et
  al., J. Exp. Soc. Psychol. 49, 2013, recommend 2.5-3 as the cut-off). A unit no
  further out than the peers are from each other is one of them, whatever its interval
  says;
- a unit stands out when the whole interval lies beyond both that spread and the
  caller's minimum effect (``min_ratio``; ``min_excess`` in the samples' unit): a
  difference too small to matter is not worth a name, however sure.

``share`` says how often: the fraction of the unit's samples beyond the peers' 95th
percentile (5th where lower is worse).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from osu_dl_bench.stats.bootstrap import median_resamples, percentile_interval
from osu_dl_bench.stats.robust import robust_sd

LEVEL = 0.95
RESAMPLES = 1000
MIN_RESAMPLES = 200
# Bootstrap draws hold resamples x samples values: at most this many at once.
DRAW_LIMIT = 4_000_000
# Leys et al. (2013): three robust standard deviations is their "very conservative" cut-off.
SPREAD_CUTOFF = 3.0
WORSE = ("higher", "lower")


@dataclass(frozen=True)
class Finding:
    """One unit that stands out from its peers, with the evidence."""

    name: str
    median: float
    peers: float
    ratio: float
    ratio_ci: tuple[float, float]
    excess: float
    excess_ci: tuple[float, float]
    share: float
    samples: int


def _interval(draws: np.ndarray) -> tuple[float, float]:
    return percentile_interval(draws, LEVEL)


def _spread(peer_medians: np.ndarray) -> tuple[float, float]:
    """How far the peers' medians lie from one another: (ratio, difference) cut-offs."""
    if peer_medians.size < 3:
        return 1.0, 0.0
    difference = SPREAD_CUTOFF * robust_sd(peer_medians)
    if np.all(peer_medians > 0):
        return math.exp(SPREAD_CUTOFF * robust_sd(np.log(peer_medians))), difference
    return 1.0, difference


def _finding(name: str, own: np.ndarray, peers: np.ndarray, rng: np.random.Generator) -> Finding:
    """The unit against its peers, with bootstrap intervals (worse or not)."""
    median, reference = float(np.median(own)), float(np.median(peers))
    own_draws = median_resamples(own, rng, RESAMPLES, MIN_RESAMPLES, DRAW_LIMIT)
    peer_draws = median_resamples(peers, rng, RESAMPLES, MIN_RESAMPLES, DRAW_LIMIT)
    count = min(own_draws.size, peer_draws.size)
    own_draws, peer_draws = own_draws[:count], peer_draws[:count]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = own_draws / peer_draws
    ratio = median / reference if reference > 0 else math.nan
    ratio_ci = _interval(ratios) if reference > 0 and np.all(peer_draws > 0) else (math.nan,) * 2
    return Finding(
        name=name,
        median=median,
        peers=reference,
        ratio=ratio,
        ratio_ci=ratio_ci,
        excess=median - reference,
        excess_ci=_interval(own_draws - peer_draws),
        share=0.0,
        samples=int(own.size),
    )


def _beyond(finding: Finding, worse: str, ratio_cut: float | None, excess_cut: float) -> bool:
    """Whether the whole interval lies beyond both cut-offs on the worse side (the ratio's
    only where ``ratio_cut`` is given and the ratio is defined)."""
    has_ratio = ratio_cut is not None and not math.isnan(finding.ratio_ci[0])
    if worse == "higher":
        by_ratio = not has_ratio or finding.ratio_ci[0] > ratio_cut
        return by_ratio and finding.excess_ci[0] > excess_cut
    by_ratio = not has_ratio or finding.ratio_ci[1] < 1 / ratio_cut
    return by_ratio and finding.excess_ci[1] < -excess_cut


def _share(own: np.ndarray, peers: np.ndarray, worse: str) -> float:
    if worse == "higher":
        return float(np.mean(own > np.percentile(peers, 95)))
    return float(np.mean(own < np.percentile(peers, 5)))


def check_samples(samples: Mapping[str, Sequence[float]], worse: str) -> dict[str, np.ndarray]:
    """The samples as finite float arrays; ValueError naming what is wrong."""
    if worse not in WORSE:
        raise ValueError(f"worse={worse!r}: expected one of {', '.join(WORSE)}")
    arrays = {}
    for name, values in samples.items():
        array = np.asarray(values, dtype=float).ravel()
        array = array[np.isfinite(array)]
        if array.size:
            arrays[name] = array
    return arrays


def against_peers(
    samples: Mapping[str, Sequence[float]], name: str, seed: int = 0
) -> Finding | None:
    """One unit against the pooled samples of the others, whether it stands out or not
    (None without samples or peers): the evidence beside a verdict made elsewhere."""
    arrays = check_samples(samples, "higher")
    if name not in arrays or len(arrays) < 2:
        return None
    peers = np.concatenate([v for other, v in arrays.items() if other != name])
    return _finding(name, arrays[name], peers, np.random.default_rng(seed))


def stand_out(
    samples: Mapping[str, Sequence[float]],
    worse: str = "higher",
    min_ratio: float | None = 1.25,
    min_excess: float = 0.0,
    seed: int = 0,
) -> list[Finding]:
    """Units whose samples are worse than their peers' beyond the run's own spread, worst
    first (non-finite samples are left out; a unit needs at least one peer). Without
    ``min_ratio`` only differences count: for quantities whose zero is the norm (a lag
    behind the earliest rank), where ratios of near-zero medians mean nothing."""
    arrays = check_samples(samples, worse)
    if len(arrays) < 2:
        return []
    rng = np.random.default_rng(seed)
    medians = {name: float(np.median(values)) for name, values in arrays.items()}
    found = []
    for name, own in arrays.items():
        peers = np.concatenate([v for other, v in arrays.items() if other != name])
        peer_medians = np.array([m for other, m in medians.items() if other != name])
        ratio_spread, excess_spread = _spread(peer_medians)
        finding = _finding(name, own, peers, rng)
        ratio_cut = None if min_ratio is None else max(min_ratio, ratio_spread)
        if _beyond(finding, worse, ratio_cut, max(min_excess, excess_spread)):
            found.append(replace(finding, share=_share(own, peers, worse)))
    return sorted(found, key=lambda f: abs(f.excess), reverse=True)
