"""Robust least squares for the model's parameters (scipy.optimize.least_squares).

Times are fitted on *relative* residuals, ``(model - t) / t``, because the model is judged
by relative accuracy and a 16 MiB point must not drown an 8-byte one. Outliers (the
machine's speed swings) weigh less under Huber loss, its threshold HUBER_K times the
residuals' median absolute deviation (as a normal sigma), with non-negative coefficients.

``fit_pieces`` fits a piecewise line with one shared intercept: it tries every split of
the sorted sizes into up to ``max_pieces`` runs of at least ``min_points`` sizes, and
keeps more pieces only when they lower the relative error by more than ``PIECE_PENALTY``
each (the regimes of the caches and of the MPI protocols, not noise).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from osu_dl_bench.stats.robust import robust_sd

HUBER_K = 1.345  # 95% efficiency at the normal distribution
PIECE_PENALTY = 0.01  # mean relative error a piece must save to be kept
# The threshold counts as settled within 0.1%: the fitted parameters then move in their
# fourth digit at most, and each refit costs a solver run.
_THRESHOLD_SETTLED = 1e-3


@dataclass(frozen=True)
class LineFit:
    """t = intercept + slope x, and its mean absolute relative residual (outliers included,
    so a piece that misses a regime shows it)."""

    intercept: float
    slope: float
    error: float


def _huber_threshold(relative: np.ndarray) -> float:
    """HUBER_K robust standard deviations of the residuals: their median absolute
    deviation, scaled to a normal distribution's sigma."""
    return HUBER_K * robust_sd(relative)


def _nonnegative_fit(unit: np.ndarray, start: np.ndarray, loss: str, threshold: float):
    """argmin over z >= 0 of the ``loss`` of the residuals ``unit @ z - 1``.

    scipy.optimize.least_squares minimises 0.5 * sum(C**2 * rho(f**2 / C**2)) with C =
    ``f_scale``, and for loss="huber" rho(z) = z if z <= 1 else 2 * z**0.5 - 1: a residual
    is squared up to C and counted linearly beyond, so C is the Huber threshold on the
    residuals' own scale (https://docs.scipy.org/doc/scipy/reference/generated/
    scipy.optimize.least_squares.html)."""
    fit = least_squares(
        lambda z: unit @ z - 1.0,
        start,
        jac=lambda z: unit,
        bounds=(0, np.inf),
        loss=loss,
        f_scale=threshold,
    )
    return fit.x


def robust_coefficients(design: np.ndarray, t: np.ndarray, iterations: int = 30) -> np.ndarray:
    """c >= 0 (one or two columns) minimising Huber loss on the relative residuals of
    design @ c against t, with a threshold of HUBER_K robust sigmas of those residuals
    (re-estimated at most ``iterations`` times)."""
    relative = design / t[:, None]  # relative @ c - 1 = (design @ c - t) / t
    # Columns of unit norm: per-message and per-byte coefficients differ by ~1e4, and the
    # solver's tolerances are relative to the whole vector.
    norms = np.linalg.norm(relative, axis=0)
    divisors = np.where(norms > 0, norms, 1.0)
    unit = relative / divisors
    # Started from the plain least-squares solution (of least norm where the columns are
    # collinear), kept inside the bounds: from z = 0 the solver cannot move off the bound.
    start = np.linalg.lstsq(unit, np.ones(len(t)), rcond=None)[0]
    z = _nonnegative_fit(unit, np.maximum(start, 1e-3), "linear", 1.0)
    threshold = 0.0
    # The threshold depends on the fit's residuals and the fit on the threshold: refit
    # until it settles (a fixed point, as the scale of Huber's M-estimate is re-estimated
    # at each step), each time from the last fit, kept off the bound.
    for _ in range(iterations):
        new = _huber_threshold(unit @ z - 1.0)
        if new <= 0 or np.isclose(new, threshold, rtol=_THRESHOLD_SETTLED, atol=0):
            break  # an exact fit has no outliers to weigh down; a settled threshold is done
        threshold = new
        z = _nonnegative_fit(unit, np.maximum(z, 1e-3), "huber", threshold)
    # A column of zeros predicts nothing: its coefficient is 0, not the solver's start.
    return np.where(norms > 0, z / divisors, 0.0)


def robust_line(
    x: np.ndarray, t: np.ndarray, intercept: bool = True, iterations: int = 30
) -> LineFit:
    """Fit t = a + b x (a, b >= 0) minimising Huber loss on relative residuals."""
    x, t = np.asarray(x, float), np.asarray(t, float)
    if x.shape != t.shape or x.size < (2 if intercept else 1):
        raise ValueError(f"expected matching x and t with >= 2 points, got {x.shape}, {t.shape}")
    if np.any(t <= 0):
        raise ValueError("expected positive times")
    design = np.column_stack([np.ones_like(x), x]) if intercept else x[:, None]
    coef = robust_coefficients(design, t, iterations)
    rel = (design @ coef - t) / t
    a, b = (float(coef[0]), float(coef[1])) if intercept else (0.0, float(coef[0]))
    return LineFit(a, b, float(np.mean(np.abs(rel))))


@dataclass(frozen=True)
class PieceFit:
    """A line that holds from ``min_x`` (0 for the first piece) up to the next piece."""

    min_x: int
    line: LineFit


def _splits(count: int, pieces: int, min_points: int):
    for cuts in itertools.combinations(range(min_points, count - min_points + 1), pieces - 1):
        bounds = (0, *cuts, count)
        if all(b - a >= min_points for a, b in itertools.pairwise(bounds)):
            yield bounds


class _Runs:
    """Line fits of runs of the sorted points, each computed once however many splits
    share it: the first run with its own intercept, later runs a slope under it."""

    def __init__(self, x: np.ndarray, t: np.ndarray) -> None:
        self.x, self.t = x, t
        self._first: dict[int, LineFit] = {}
        self._later: dict[tuple[int, int, int], LineFit] = {}

    def first(self, end: int) -> LineFit:
        if end not in self._first:
            self._first[end] = robust_line(self.x[:end], self.t[:end])
        return self._first[end]

    def later(self, first_end: int, a: int, b: int) -> LineFit:
        key = (first_end, a, b)
        if key not in self._later:
            x, t, intercept = self.x[a:b], self.t[a:b], self.first(first_end).intercept
            # t - intercept stays positive for noise: the relative weights need t > 0.
            rest = np.maximum(t - intercept, 1e-3 * t)
            slope = robust_line(x, rest, intercept=False).slope
            rel = (intercept + slope * x - t) / t
            self._later[key] = LineFit(intercept, slope, float(np.mean(np.abs(rel))))
        return self._later[key]

    def fit(self, bounds: tuple[int, ...]) -> list[LineFit]:
        """The first run gets its own intercept; later runs share it and fit only a slope."""
        later = [self.later(bounds[1], a, b) for a, b in itertools.pairwise(bounds[1:])]
        return [self.first(bounds[1]), *later]


def fit_pieces(
    x: np.ndarray, t: np.ndarray, max_pieces: int = 4, min_points: int = 3
) -> list[PieceFit]:
    """Piecewise robust fit t = a + b_i x over sorted ``x``: one intercept for all pieces
    (alpha is a per-message latency, whatever the size), a slope per piece (the bandwidth
    of a regime); more pieces only when each earns its keep."""
    order = np.argsort(x)
    x, t = np.asarray(x, float)[order], np.asarray(t, float)[order]
    best: list[PieceFit] = []
    best_score = np.inf
    runs = _Runs(x, t)
    for pieces in range(1, max_pieces + 1):
        for bounds in _splits(len(x), pieces, min_points):
            fits = runs.fit(bounds)
            sizes = np.diff(bounds)
            error = float(np.sum([f.error * n for f, n in zip(fits, sizes, strict=True)]) / len(x))
            score = error + PIECE_PENALTY * (pieces - 1)
            if score < best_score:
                starts = [0] + [int(x[a]) for a in bounds[1:-1]]
                best, best_score = (
                    [PieceFit(s, f) for s, f in zip(starts, fits, strict=True)],
                    score,
                )
    return best
