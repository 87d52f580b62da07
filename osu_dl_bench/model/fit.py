"""Robust least squares for the model's parameters (numpy only).

Times are fitted on *relative* residuals, ``(model - t) / t``, because the model is judged
by relative accuracy and a 16 MiB point must not drown an 8-byte one. Outliers (the
machine's speed swings) are down-weighted by iteratively reweighted least squares with
Huber weights on residuals scaled by their median absolute deviation.

``fit_pieces`` fits a piecewise line with one shared intercept: it tries every split of
the sorted sizes into up to ``max_pieces`` runs of at least ``min_points`` sizes, and
keeps more pieces only when they lower the relative error by more than ``PIECE_PENALTY``
each (the regimes of the caches and of the MPI protocols, not noise).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

HUBER_K = 1.345  # 95% efficiency at the normal distribution
PIECE_PENALTY = 0.01  # mean relative error a piece must save to be kept
_MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class LineFit:
    """t = intercept + slope x, and its mean absolute relative residual (outliers included,
    so a piece that misses a regime shows it)."""

    intercept: float
    slope: float
    error: float


def _huber_weights(residuals: np.ndarray) -> np.ndarray:
    scale = _MAD_TO_SIGMA * np.median(np.abs(residuals - np.median(residuals)))
    if scale <= 0:
        return np.ones_like(residuals)
    u = np.abs(residuals) / (HUBER_K * scale)
    return np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-300))


def _weighted_nonnegative(design: np.ndarray, t: np.ndarray, w: np.ndarray) -> np.ndarray:
    """argmin sum w (design c - t)^2 over c >= 0 (two columns: try each active set)."""
    sw = np.sqrt(w)
    coef = np.linalg.lstsq(design * sw[:, None], t * sw, rcond=None)[0]
    if np.all(coef >= 0):
        return coef
    best, best_cost = np.zeros(design.shape[1]), np.inf
    for keep in range(design.shape[1]):
        col = design[:, keep]
        c = max(0.0, float(np.sum(w * col * t) / max(np.sum(w * col * col), 1e-300)))
        cost = float(np.sum(w * (col * c - t) ** 2))
        if cost < best_cost:
            best, best_cost = np.zeros(design.shape[1]), cost
            best[keep] = c
    return best


def robust_coefficients(design: np.ndarray, t: np.ndarray, iterations: int = 30) -> np.ndarray:
    """c >= 0 (one or two columns) minimising Huber loss on the relative residuals of
    design @ c against t (iteratively reweighted least squares)."""
    base = 1.0 / t**2  # relative residuals: (model - t) / t
    w = base.copy()
    coef = np.zeros(design.shape[1])
    for _ in range(iterations):
        new = _weighted_nonnegative(design, t, w)
        rel = (design @ new - t) / t
        w = base * _huber_weights(rel)
        if np.allclose(new, coef, rtol=1e-10, atol=0):
            break
        coef = new
    return coef


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
