"""From a run directory's calibration measurements to its platform file.

The calibration rows come from the sweep's own launches (measurement.calibration, run once
in every launch of the "mpi" group) or from standalone calibration jobs (run_calibration_job);
the fit takes, per process count, kind and size, the median over jobs. One contention
state per calibrated process count p (all p ranks of the node active). Its alpha and
beta: piecewise robust fit of the concurrent ring exchange's step time, t = alpha + beta n
(calibrations from before the exchange existed: the ping-pong's one-way time). gamma:
piecewise robust fit of the in-place reduction's time, t = c + gamma n (c, the ufunc call,
is part of the software overhead), and the same for MPI's own reduction (gamma of native,
when measured). Software overhead: the median excess of one Python algorithm step over the
exchange at the same small size. Barrier: the median MPI_Barrier. Reference: the medians
of the ref_copy and ref_allreduce rows (the machine's state while it calibrated). The
platform's ``intra`` link is the state with the fewest ranks.
The inter-node link cannot be measured on one host: it is recorded as not measured (a copy
of the intra-node link) and predictions across nodes then need a named interconnect.
A calibration that ran one rank per node on several nodes (scripts/cluster_local.sh)
measured the link between nodes instead: that is the inter-node link, and the intra-node
one is then the copy, not measured.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from osu_dl_bench import __version__
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.calibration import CALIBRATION_CSV, CALIBRATION_JSON, KINDS
from osu_dl_bench.model.fit import PieceFit, fit_pieces
from osu_dl_bench.model.platform import ContentionState, Link, Piece, Platform, Reference
from osu_dl_bench.runtime.metadata import COMMAND_KEY, command_line, utc_now

PLATFORM_FILE = "platform.json"


def has_calibration(run_dir: Path) -> bool:
    """Whether a run directory holds calibration rows (its sweep's or a calibration job's)."""
    return (Path(run_dir) / CALIBRATION_CSV).is_file()


def load_calibration(run_dir: Path) -> tuple[pd.DataFrame, dict]:
    """calibration.csv (checked) and calibration.json of a run directory."""
    path = run_dir / CALIBRATION_CSV
    try:
        frame = pd.read_csv(path, dtype={"job": str})
    except (OSError, pd.errors.ParserError) as exc:
        raise UsageError(f"{path}: cannot read the calibration: {exc}") from None
    missing = {"kind", "size_bytes", "median_s"} - set(frame.columns)
    if missing:
        raise UsageError(f"{path}: expected columns kind, size_bytes, median_s; missing {missing}")
    if "nprocs" not in frame.columns:
        frame["nprocs"] = 2  # the first calibrations ran on 2 ranks only
    for nprocs, rows in frame.groupby("nprocs"):
        for kind in ("reduce", _link_kind(rows)):
            if not _has(rows, kind):
                raise UsageError(
                    f"{path}: expected >= 4 sizes of kind {kind!r} at nprocs {nprocs} "
                    f"(kinds: {KINDS})"
                )
    meta_path = run_dir / CALIBRATION_JSON
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return frame, meta


def _medians(frame: pd.DataFrame, kind: str) -> pd.Series:
    """size -> median over calibration jobs of the job medians."""
    rows = frame[(frame["kind"] == kind) & (frame["median_s"] > 0)]
    return rows.groupby("size_bytes")["median_s"].median().sort_index()


def _series(frame: pd.DataFrame, kind: str) -> tuple[np.ndarray, np.ndarray]:
    medians = _medians(frame, kind)
    return medians.index.to_numpy(float), medians.to_numpy(float)


def _has(frame: pd.DataFrame, kind: str) -> bool:
    return int((frame["kind"] == kind).sum()) >= 4


def _link_kind(frame: pd.DataFrame) -> str:
    """The kind that gives alpha and beta: the concurrent exchange, else the ping-pong."""
    return "exchange" if _has(frame, "exchange") else "pingpong"


def _alpha_beta(fits: list[PieceFit]) -> tuple[Piece, ...]:
    return tuple(Piece(f.min_x, (f.line.intercept, f.line.slope)) for f in fits)


def _gamma(fits: list[PieceFit]) -> tuple[Piece, ...]:
    return tuple(Piece(f.min_x, (f.line.slope,)) for f in fits)


def _overhead(frame: pd.DataFrame, kind: str) -> float:
    """Median excess of a Python algorithm step over the ``kind`` message, at the same sizes."""
    step, message = _medians(frame, "step"), _medians(frame, kind)
    both = step.index.intersection(message.index)
    if both.empty:
        return 0.0
    return max(0.0, float(np.median(step[both] - message[both])))


def _barrier(frame: pd.DataFrame) -> float | None:
    medians = _medians(frame, "barrier")
    return float(np.median(medians)) if len(medians) else None


def _reference(frame: pd.DataFrame) -> Reference | None:
    """The calibration's machine state: the median over jobs of each reference's median."""
    copy, allreduce = _medians(frame, "ref_copy"), _medians(frame, "ref_allreduce")
    if copy.empty or allreduce.empty:
        return None  # a calibration from before the reference was timed
    return Reference(float(np.median(copy)), float(np.median(allreduce)))


def fit_state(frame: pd.DataFrame, ranks: int) -> tuple[ContentionState, dict]:
    """The contention state of one process count's calibration rows, and its fit quality."""
    kind = _link_kind(frame)
    ab_fits = fit_pieces(*_series(frame, kind))
    gamma_fits = fit_pieces(*_series(frame, "reduce"))
    native_fits = fit_pieces(*_series(frame, "reduce_mpi")) if _has(frame, "reduce_mpi") else []
    link = Link(
        _alpha_beta(ab_fits),
        _gamma(gamma_fits),
        True,
        f"fitted: {kind} with {ranks} ranks active, numpy and MPI reductions",
        _gamma(native_fits) if native_fits else None,
    )
    quality = {
        f"{kind}_mean_rel_error": [round(f.line.error, 4) for f in ab_fits],
        "reduce_mean_rel_error": [round(f.line.error, 4) for f in gamma_fits],
        "reduce_mpi_mean_rel_error": [round(f.line.error, 4) for f in native_fits],
    }
    state = ContentionState(ranks, link, _overhead(frame, kind), _barrier(frame), _reference(frame))
    return state, quality


def one_rank_per_node(meta: dict) -> tuple[str, ...]:
    """The nodes of a calibration whose every job ran one rank on each of several nodes
    (its exchanges all crossed the network); () otherwise."""
    jobs = meta.get("jobs") or [meta]
    hosts = [job.get("hosts") or () for job in jobs]
    if all(len(job.get("hosts") or ()) == job.get("nprocs", 0) > 1 for job in jobs):
        return tuple(sorted({host for h in hosts for host in h}))
    return ()


def _links(fitted: Link, meta: dict) -> tuple[Link, Link]:
    """(intra, inter): the fitted link is the inter-node one where every rank had a node
    of its own, else the intra-node one; the other is its copy, marked not measured."""
    nodes = one_rank_per_node(meta)
    if nodes:
        note = fitted.note.replace("fitted:", f"fitted across nodes {','.join(nodes)}:", 1)
        inter = replace(fitted, note=note)
        intra = replace(
            fitted,
            measured=False,
            note="not measured: every calibration rank had a node of its own; a copy of the "
            "inter-node link",
        )
        return intra, inter
    hosts = meta.get("hosts") or []
    inter = replace(
        fitted,
        measured=False,
        note=f"not measured: the calibration ran on one host ({','.join(hosts) or '?'}); "
        "a copy of the intra-node link. Predict across nodes with --inter NAME",
    )
    return fitted, inter


def fit_platform(run_dir: str | Path, name: str | None = None) -> tuple[Platform, dict]:
    """The platform of a run directory's calibration, and the fit's quality."""
    run_dir = Path(run_dir)
    frame, meta = load_calibration(run_dir)
    fitted = [fit_state(rows, int(p)) for p, rows in frame.groupby("nprocs")]
    states = tuple(state for state, _ in fitted)
    quality = {f"p={state.ranks}": q for state, q in fitted}
    base = states[0]
    intra, inter = _links(base.intra, meta)
    platform = Platform(
        name=name or run_dir.resolve().name,
        intra=intra,
        inter=inter,
        cores_per_node=meta.get("cores_per_node"),
        software_overhead_s=base.software_overhead_s,
        assumed=False,
        source=f"fitted to {run_dir / CALIBRATION_CSV} by robust (Huber) least squares, "
        f"contention states of {', '.join(str(s.ranks) for s in states)} ranks per node",
        provenance={
            "calibration": meta,
            "fit_quality": quality,
            "fitted_by": {
                "package_version": __version__,
                COMMAND_KEY: command_line(),
                "date": utc_now(),
            },
        },
        states=states,
    )
    return platform, quality
