"""Whether an MPI library applied an exported selection file, and the speedup the file
gives: the numbers of ``osu-dl-bench verify-export``.

The library's plain collectives (native, no Python algorithm) run with the file loaded and
without it, in launches of their own, interleaved (the file's launches are the isolation
group jobs.plan.FILE_GROUP); the speedup per size is the two groups paired by launch
medians (selection.paired), with the launch-to-launch variance pooled over every size
(selection.estimate).

Proof (MPICH): each algorithm the file names also runs forced (native:alg=NAME, launches
of its own), and every launch records the allreduce fingerprints (collectives.mpit.
fingerprints: a reduction declared commutative that is not, so the result shows which
algorithm combined it) at every size. The file took effect where, at every size, its
fingerprint is that of the algorithm it names there (or the default's where it keeps the
default); it is proven where at least one such algorithm's fingerprint differs from the
default's. A mismatch means the library did not apply the file.

The null control: the C client runs three arms in every launch round, in a balanced order
(arm_order): the file, the default, and the default loaded through a selection file of its
own (null_control_environment), an A/A pair with the default. The file's gain at a size is
confirmed only where it passes the decision rule and lies beyond the null control's spread
there (gain_beyond_null); the null control's own false gains and slowdowns are counted
beside the file's (summarize), so the report says what noise alone produced.
"""

from __future__ import annotations

import json
import math
from collections.abc import Container, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from collectives import mpich_layers, mpit
from collectives.registry import NULL_CONTROL_APART
from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.plan import FILE_GROUP, FORCED_PREFIX, MPI_GROUP
from osu_dl_bench.measurement.schedule import rotation
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.runtime.launcher import posix_pinned
from osu_dl_bench.runtime.mpich_trees import generic_trees, selection_files_env
from osu_dl_bench.selection.estimate import pooled_ratios
from osu_dl_bench.selection.evidence import LaunchValues, Observation, launch_values
from osu_dl_bench.selection.exports import openmpi
from osu_dl_bench.selection.exports.common import LIBRARY_DEFAULT, LIBRARY_TUNING
from osu_dl_bench.selection.exports.readers import Reader, ShapeOf, one_node
from osu_dl_bench.selection.paired import Ratio, bound_text
from osu_dl_bench.selection.rule import DEFAULT_RULE, DecisionRule
from osu_dl_bench.selection.table import TuningTable
from osu_dl_bench.selection.tune import series_of, usable_rows
from osu_dl_bench.stats.bootstrap import ratio_of_summed_means

# --- proof --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fingerprinted:
    """One size of one launch whose fingerprint with the file was checked against the
    algorithm the file names there (None: the library's default)."""

    nprocs: int
    launch: int
    size: int
    algorithm: str | None


@dataclass(frozen=True)
class Proof:
    """What the fingerprints say: the sizes where the file's algorithm was seen and could be
    told from the default, the mismatches (the file not applied), and how many were checked."""

    seen: tuple[Fingerprinted, ...]
    mismatches: tuple[Fingerprinted, ...]
    checked: int
    # Checked sizes where the file's fingerprint matched, but so would the default's.
    alike: tuple[Fingerprinted, ...] = ()

    @property
    def distinguishable(self) -> int:
        """Checked sizes whose named algorithm's fingerprint differs from the default's."""
        return len(self.seen)

    def at(self, nprocs: int, size: int) -> str:
        """What the fingerprints show at one allreduce size, over every launch: 'MISMATCH'
        (the file not applied), 'proven' (its algorithm's, not the default's), 'alike'
        (its algorithm's, which the default's equals), '' (none recorded)."""

        def here(checks: tuple[Fingerprinted, ...]) -> bool:
            return any(c.nprocs == nprocs and c.size == size for c in checks)

        for word, checks in (("MISMATCH", self.mismatches), ("proven", self.seen)):
            if here(checks):
                return word
        return "alike" if here(self.alike) else ""


def _fingerprints(entries: dict[str, Any], launch: int, group: str) -> dict[str, Any]:
    """A launch's recorded fingerprints (size text -> every rank's hash)."""
    return entries.get(f"{launch}/{group}", {}).get("fingerprints") or {}


def prove(metadata: dict[str, Any], reader: Reader, launches: int) -> Proof:
    """Compare each launch's fingerprints with and without the file (see the module text)."""
    seen: list[Fingerprinted] = []
    mismatches: list[Fingerprinted] = []
    alike: list[Fingerprinted] = []
    checked = 0
    for nprocs, job in sorted((metadata.get("jobs") or {}).items()):
        entries = job.get("launches") or {}
        for launch in range(1, launches + 1):
            plain = _fingerprints(entries, launch, MPI_GROUP)
            for size, found in _fingerprints(entries, launch, FILE_GROUP).items():
                alg = reader("allreduce", int(nprocs), int(size))
                reference = (
                    plain if alg is None else _fingerprints(entries, launch, FORCED_PREFIX + alg)
                )
                expected = reference.get(size)
                if expected is None:
                    continue
                checked += 1
                where = Fingerprinted(int(nprocs), launch, int(size), alg)
                if found != expected:
                    mismatches.append(where)
                elif alg is not None and expected != plain.get(size):
                    seen.append(where)
                else:
                    alike.append(where)
    return Proof(tuple(seen), tuple(mismatches), checked, tuple(alike))


# --- speedup ------------------------------------------------------------------------------

# (collective, p, size) and its launches' log-ratios, with the file over without it.
Paired = tuple[tuple, LaunchValues]

# The C client's three arms: the exported file, the library's default, and the null
# control (the default loaded through a selection file of its own: an A/A pair with the
# default, so that what noise alone makes of "the file against the default" is measured
# in the same launches, by the same estimator).
FILE_ARM, DEFAULT_ARM, NULL_ARM = "file", "default", "null"
ARMS = (FILE_ARM, DEFAULT_ARM, NULL_ARM)


def arm_order(launch: int, seed: int, arms: Sequence[str] = ARMS) -> tuple[str, ...]:
    """The order of ``arms`` in launch ``launch`` (from 1): the rows of a Williams design
    for k arms in turn (measurement.schedule.rotation), starting at a row the seed picks;
    over each whole cycle (williams_cycle(k) launches: 6 for the three arms) each arm runs
    in each position, and right after each other arm, equally often, so that neither the
    order nor what ran just before favours one arm."""
    return tuple(arms[i] for i in rotation(launch - 1 + seed, len(arms)))


def sweep_pairs(frame: pd.DataFrame, arm: str = FILE_ARM) -> list[Paired]:
    """The sweep's native with the file (``arm`` FILE_ARM), or its null control across
    launches (NULL_ARM: native:null_apart, launches of its own), against native without
    the file, per (collective, p, size)."""
    rows = usable_rows(frame)
    default = rows[(rows["algorithm"] == "native") & (rows["group"] == MPI_GROUP)]
    if arm == FILE_ARM:
        other = rows[(rows["algorithm"] == "native") & (rows["group"] == FILE_GROUP)]
    else:
        other = rows[rows["algorithm"] == NULL_CONTROL_APART]
    keys = ["collective", "nprocs", "size_bytes"]
    defaults = dict(iter(default.groupby(keys, sort=True)))
    found = []
    for where, at in other.groupby(keys, sort=True):
        reference = defaults.get(where)
        if reference is None:
            continue
        values = launch_values(series_of(at), series_of(reference))
        if values is not None:
            found.append((where, values))
    return found


def client_pairs(latencies: dict[tuple, dict[int, float]], arm: str = FILE_ARM) -> list[Paired]:
    """The C client's launches as per-launch log-ratios, ``arm`` (the file, or the null
    control) over the default: ``latencies`` maps (collective, p, size, arm) to
    {launch: us}."""
    found = []
    for (collective, nprocs, size, which), loaded in sorted(latencies.items()):
        if which != arm:
            continue
        default = latencies.get((collective, nprocs, size, DEFAULT_ARM), {})
        pairs = [
            (k, math.log(loaded[k] / default[k]))
            for k in sorted(set(loaded) & set(default))
            if loaded[k] > 0 < default[k]
        ]
        if pairs:
            launches, values = zip(*pairs, strict=True)
            unknown = np.full(len(values), np.nan)  # the client reports means only
            found.append(
                (
                    (collective, nprocs, size),
                    LaunchValues(launches, np.array(values), unknown, False),
                )
            )
    return found


def file_ratios(client: str, found: list[Paired]) -> list[Ratio]:
    """Per (collective, p, size) of ``found``, in its order: the time with the file over
    without it, with its 95% interval, the launch-to-launch variance pooled over every
    size, or the size's own where it is larger (selection.estimate.pooled_ratios)."""
    # One pool per client, collective and p: launches at p = 4 swing more than at p = 2.
    observations = [Observation((client, *w[:2]), client, int(w[2]), v) for w, v in found]
    return pooled_ratios(observations)


def slower_with_file(ratio: Ratio) -> bool:
    """The file's time over the default's lies above 1 over its whole interval."""
    return ratio.low > 1


# --- the gain, judged against the null control ---------------------------------------------

# Where the library's default is the reference of the rule: its ratio to itself.
_DEFAULT_ITSELF = Ratio(1.0, 1.0, 1.0, 0, 0)


def gain_beyond_null(file: Ratio, null: Ratio | None, rule: DecisionRule = DEFAULT_RULE) -> bool:
    """Whether the file's gain over the default at one size is confirmed: the decision rule
    (selection.rule) would choose the file over the default, and the file's whole 95%
    interval lies below 1 and below the whole of the null control's interval (the A/A
    spread at that size). Two 95% intervals that do not overlap are a stricter test than
    one interval excluding 1 (Schenker and Gentleman, "On judging the significance of
    differences by examining the overlap between confidence intervals", The American
    Statistician 55, 2001): the file must beat both 1 and what noise alone showed."""
    if null is None or rule.choose({"default": _DEFAULT_ITSELF, "file": file}, "default") != "file":
        return False
    return file.high < min(1.0, null.low)


@dataclass(frozen=True)
class SizeVerdict:
    """One (collective, p, size) of the C client: what the file names there (None: the
    default), the file's and the null control's time over the default's, and what follows."""

    where: tuple  # (collective, p, size)
    says: str | None
    file: Ratio
    null: Ratio | None

    @property
    def departs(self) -> bool:
        """The file names an algorithm of its own here."""
        return self.says is not None

    @property
    def confirmed(self) -> bool:
        """The file's gain is confirmed beyond the null control (gain_beyond_null)."""
        return gain_beyond_null(self.file, self.null)

    @property
    def refused(self) -> bool:
        """The file departs from the default here without a confirmed gain."""
        return self.departs and not self.confirmed

    @property
    def slower(self) -> bool:
        """The file is slower than the default beyond its interval."""
        return slower_with_file(self.file)

    @property
    def null_false_gain(self) -> bool:
        """The null control (the default itself) came out faster than the default over its
        whole interval: noise alone passing for a gain."""
        return self.null is not None and self.null.high < 1

    @property
    def null_slower(self) -> bool:
        """The null control came out slower than the default over its whole interval."""
        return self.null is not None and self.null.low > 1

    def reason(self) -> str:
        """Why a departure is refused, in words and in speedups over the default, as the
        report shows them ('' where it is not refused)."""
        if not self.refused:
            return ""
        if self.null is None:
            return "no null control measured at this size"
        speedup = f"its speedup's 95% CI {speedup_interval(self.file)}"
        if self.file.low > 1:
            return f"slower than the default: {speedup} lies below 1"
        if self.file.high >= 1:
            return f"{speedup} includes 1"
        if self.file.high >= self.null.low:
            return (
                f"{speedup} overlaps the null control's {speedup_interval(self.null)} "
                "(the A/A spread)"
            )
        return "the decision rule keeps the default (risk or indifference zone)"


def speedup_interval(ratio: Ratio) -> str:
    """'1.12-1.40': the 95% interval of the speedup over the default (1 / the ratio)."""
    return f"{bound_text(_inverse(ratio.high))}-{bound_text(_inverse(ratio.low))}"


def _inverse(value: float) -> float:
    """1 / value, with 1/0 = inf and 1/inf = 0 (an interval without a bound)."""
    return math.inf if value == 0 else 1 / value


def verdicts(
    client: str, file_pairs: list[Paired], null_pairs: list[Paired], reader: Reader
) -> list[SizeVerdict]:
    """Per (collective, p, size) of ``file_pairs``: the file and the null control against
    the default, each with the launch-to-launch variance pooled over the sizes of its own
    arm (file_ratios), and what the file names there."""
    null_ratios = file_ratios(f"{client}:null", null_pairs)
    nulls = {tuple(w): r for (w, _), r in zip(null_pairs, null_ratios, strict=True)}
    found = []
    for (where, _), ratio in zip(file_pairs, file_ratios(client, file_pairs), strict=True):
        collective, nprocs, size = where
        says = reader(collective, int(nprocs), int(size))
        found.append(SizeVerdict(tuple(where), says, ratio, nulls.get(tuple(where))))
    return found


# The C client's latencies in the run directory, one record per launch, arm and size, so
# that its verdicts can be read again without measuring again.
CLIENT_FILE = "c_client_latencies.json"


def client_records(latencies: dict[tuple, dict[int, float]]) -> list[dict[str, Any]]:
    """The C client's latencies as records: collective, nprocs, size_bytes, arm, launch, us."""
    return [
        {"collective": c, "nprocs": p, "size_bytes": s, "arm": a, "launch": k, "us": us}
        for (c, p, s, a), per_launch in sorted(latencies.items())
        for k, us in sorted(per_launch.items())
    ]


def client_latencies(records: list[dict[str, Any]]) -> dict[tuple, dict[int, float]]:
    """client_records read back: (collective, p, size, arm) -> {launch: us}."""
    found: dict[tuple, dict[int, float]] = {}
    for r in records:
        key = (r["collective"], int(r["nprocs"]), int(r["size_bytes"]), r["arm"])
        found.setdefault(key, {})[int(r["launch"])] = float(r["us"])
    return found


def client_verdicts(
    latencies: dict[tuple, dict[int, float]], reader: Reader, client: str = "c"
) -> list[SizeVerdict]:
    """The C client's verdicts (verdicts) from its latencies by (collective, p, size, arm)."""
    return verdicts(
        client, client_pairs(latencies, FILE_ARM), client_pairs(latencies, NULL_ARM), reader
    )


@dataclass(frozen=True)
class NullSummary:
    """The counts a client's verdicts come to: sizes, the file's departures confirmed and
    refused, sizes slower than the default beyond the interval with the file and with the
    null control, and the null control's false gains."""

    sizes: int
    departures: int
    confirmed: int
    slower: int
    null_judged: int
    null_slower: int
    null_false_gains: int

    @property
    def false_gain_rate(self) -> float:
        """The share of sizes where the null control passed for a gain."""
        return self.null_false_gains / self.null_judged if self.null_judged else math.nan


def summarize(verdicts: list[SizeVerdict]) -> NullSummary:
    """The counts of a client's verdicts."""
    judged = [v for v in verdicts if v.null is not None]
    return NullSummary(
        sizes=len(verdicts),
        departures=sum(v.departs for v in verdicts),
        confirmed=sum(v.departs and v.confirmed for v in verdicts),
        slower=sum(v.slower for v in verdicts),
        null_judged=len(judged),
        null_slower=sum(v.null_slower for v in judged),
        null_false_gains=sum(v.null_false_gain for v in judged),
    )


# --- the null control's files ---------------------------------------------------------------


def null_control_environment(library: str, directory: Path) -> dict[str, str]:
    """The environment of the null control's launches: the library's own default loaded
    through selection files written into ``directory``, the way an export is loaded (Open
    MPI: a rules file of algorithm 0 everywhere, openmpi.default_rules_text; MPICH: its
    generic ch4, POSIX and MPIR trees as files, runtime.mpich_trees.selection_files_env)."""
    directory.mkdir(parents=True, exist_ok=True)
    if library == "mpich":
        return selection_files_env(directory)
    path = directory / "null.openmpi.rules"
    write_text_atomic(path, openmpi.default_rules_text())
    return mpit.selection_file_environment(library, str(path.resolve()))


# --- the best measured choice, and the share of its speedup the file captures ----------------

# The layered candidates a sweep measured: (collective, p) -> alg -> the sizes measured.
MeasuredCandidates = dict[tuple[str, int], dict[str, tuple[int, ...]]]
# How a sweep labels a forced library algorithm (jobs.plan.forced_alg's variants).
_FORCED_LABEL = "native:alg="


def measured_candidates(frame: pd.DataFrame) -> MeasuredCandidates:
    """MPICH's layered candidates (collectives.mpich_layers) a sweep measured, each with the
    sizes it measured it at: the sweep skips a candidate where its path is the default's,
    so these are the sizes where it runs code of its own."""
    rows = usable_rows(frame)
    found: MeasuredCandidates = {}
    keys = ["collective", "nprocs", "algorithm"]
    for (collective, nprocs, label), at in rows.groupby(keys, sort=True):
        alg = str(label).removeprefix(_FORCED_LABEL)
        if str(label).startswith(_FORCED_LABEL) and mpich_layers.is_candidate(collective, alg):
            sizes = tuple(sorted({int(s) for s in at["size_bytes"]}))
            found.setdefault((str(collective), int(nprocs)), {})[alg] = sizes
    return found


def own_code_only(
    measured: MeasuredCandidates, shape_of: ShapeOf
) -> tuple[MeasuredCandidates, list[str]]:
    """``measured`` less the sizes where a candidate runs the default's code in the job shape
    of this run (collectives.mpich_layers.candidate_sizes: the nodes a job of p ranks spans,
    the POSIX layer pinned under oversubscription; the C client's float32 sums), since the
    sweep measured each at every size of its own shape where it ran other code at one;
    and a line per candidate and reason saying where it is not judged, and why."""
    base = generic_trees().trees
    kept: MeasuredCandidates = {}
    lines = []
    for (collective, nprocs), algs in sorted(measured.items()):
        shape = shape_of(nprocs)
        pinned = posix_pinned(shape.ranks_per_node)
        call = mpich_layers.Call(
            collective, nprocs, shape.nodes, 1, itemsize=4, oversubscribed=pinned
        )
        for alg, sizes in sorted(algs.items()):
            cand = mpich_layers.candidate(collective, alg)
            same = mpich_layers.candidate_sizes(cand, call, list(sizes), base)
            for reason in sorted(set(same.values())):
                at = [format_size(s) for s in sizes if same.get(s) == reason]
                lines.append(
                    f"# c: {collective} p={nprocs} {alg} not judged at {', '.join(at)}: it "
                    f"runs the default's code there ({shape.nodes} node(s), "
                    f"{shape.ranks_per_node} rank(s) per node"
                    f"{', POSIX pinned to MPIR' if pinned else ''}): {reason}"
                )
            if rest := tuple(s for s in sizes if s not in same):
                kept.setdefault((collective, nprocs), {})[alg] = rest
    return kept, lines


def client_arms(candidates: Sequence[str]) -> tuple[str, ...]:
    """The C client's arms for one collective and p: ARMS, then one per measured candidate
    (named by its alg, 'ch4_beta'), loading its own files as the sweep loaded them."""
    clash = set(candidates) & set(ARMS)
    if clash:
        raise ValueError(f"candidate names {sorted(clash)} clash with the client's arms")
    return (*ARMS, *sorted(candidates))


@dataclass(frozen=True)
class BestChoice:
    """One (collective, p, size) where candidates were measured: the rule's pick among them
    and the default (None: the default), its time over the default's, and the null
    control's there."""

    where: tuple  # (collective, p, size)
    choice: str | None
    ratio: Ratio
    null: Ratio | None

    @property
    def confirmed(self) -> bool:
        """The pick is a candidate whose gain is confirmed beyond the null control."""
        return self.choice is not None and gain_beyond_null(self.ratio, self.null)


def best_choices(
    latencies: dict[tuple, dict[int, float]],
    measured: MeasuredCandidates,
    rule: DecisionRule = DEFAULT_RULE,
) -> list[BestChoice]:
    """Per (collective, p, size) where the sweep measured a candidate: the candidates' C client
    ratios to the default (each arm's launch variance pooled over its sizes, as file_ratios
    does for the file) and the decision rule's pick among them and the default (selection.
    rule: tune's rule, with the default as its reference)."""
    null_pairs = client_pairs(latencies, NULL_ARM)
    nulls = dict(zip([w for w, _ in null_pairs], file_ratios("c:null", null_pairs), strict=True))
    at_size: dict[tuple, dict[str, Ratio]] = {}
    for (collective, nprocs), algs in sorted(measured.items()):
        for alg, sizes in sorted(algs.items()):
            pairs = [
                (w, v)
                for w, v in client_pairs(latencies, alg)
                if w[0] == collective and w[1] == nprocs and w[2] in sizes
            ]
            for (where, _), ratio in zip(pairs, file_ratios(f"c:{alg}", pairs), strict=True):
                at_size.setdefault(where, {})[alg] = ratio
    found = []
    for where, ratios in sorted(at_size.items()):
        pick = rule.choose({DEFAULT_ARM: _DEFAULT_ITSELF, **ratios}, DEFAULT_ARM)
        choice = None if pick == DEFAULT_ARM else pick
        ratio = _DEFAULT_ITSELF if choice is None else ratios[choice]
        found.append(BestChoice(where, choice, ratio, nulls.get(where)))
    return found


@dataclass(frozen=True)
class CapturedShare:
    """The share of the measured speedup the file captures: over the sizes where the best
    choice is confirmed faster than the default, sum log(default / file) over sum
    log(default / best), all from the C client; undefined (nan) without such a size. Its
    95% interval (low, high) comes from the C client's launches resampled (nan: fewer than
    MIN_LAUNCHES launches, or the best choices' gain gone in too many resamples)."""

    sizes: tuple[tuple, ...]
    captured: float  # sum of log(default / file)
    available: float  # sum of log(default / best)
    low: float = math.nan
    high: float = math.nan

    @property
    def share(self) -> float:
        """captured / available, nan where no size has a confirmed best choice."""
        return self.captured / self.available if self.sizes else math.nan


# The captured share's resamples start from this seed: the same launches give the same
# interval.
SHARE_SEED = 0


def captured_share(
    file_verdicts: list[SizeVerdict],
    best: list[BestChoice],
    latencies: dict[tuple, dict[int, float]],
) -> CapturedShare:
    """The CapturedShare of ``best``'s confirmed sizes that the file's verdicts cover, with
    its interval from the C client's ``latencies``."""
    files = {tuple(v.where): v.file for v in file_verdicts}
    resting = [b for b in best if b.confirmed and tuple(b.where) in files]
    share = CapturedShare(
        tuple(tuple(b.where) for b in resting),
        sum(-math.log(files[tuple(b.where)].ratio) for b in resting),
        sum(-math.log(b.ratio.ratio) for b in resting),
    )
    if not resting:
        return share
    low, high = ratio_of_summed_means(share_strata(latencies, resting), SHARE_SEED)
    return replace(share, low=low, high=high)


def share_strata(
    latencies: dict[tuple, dict[int, float]], resting: list[BestChoice]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per (collective, p): log(default / file) and log(default / best) per size (rows) and
    launch (columns, nan where a launch lacks one of the three), from client_pairs' launch
    log-ratios: launches of one job shape are resampled together, the sizes of a launch
    stay paired."""
    arms = {FILE_ARM, *(b.choice for b in resting)}  # a confirmed best choice names its arm
    by_arm = {arm: dict(client_pairs(latencies, arm)) for arm in arms}
    strata = []
    for key in sorted({tuple(b.where[:2]) for b in resting}):
        here = [b for b in resting if tuple(b.where[:2]) == key]
        launches = sorted({k for b in here for k in latencies.get((*b.where, DEFAULT_ARM), {})})
        gains = [
            (
                _log_gains(by_arm[FILE_ARM].get(tuple(b.where)), launches),
                _log_gains(by_arm[b.choice].get(tuple(b.where)), launches),
            )
            for b in here
        ]
        strata.append((np.array([f for f, _ in gains]), np.array([g for _, g in gains])))
    return strata


def _log_gains(found: LaunchValues | None, launches: list[int]) -> list[float]:
    """log(default / arm) per launch of ``launches``: the negated launch log-ratios of
    client_pairs; nan where a launch gave none."""
    ratios = {} if found is None else dict(zip(found.launches, found.values, strict=True))
    return [-float(ratios[k]) if k in ratios else math.nan for k in launches]


# The suffixes of an export's files: the table they were exported from is BASE.json.
_EXPORT_SUFFIXES = (".mpich.mpir.json", ".mpich.json", ".openmpi.rules")


def export_table(path: Path) -> Path | None:
    """The table an export was written from: BASE.json beside BASE.mpich.mpir.json (as
    ``tune -o BASE.json --export`` writes them), or None where it is not there."""
    name = path.name
    suffix = next((s for s in _EXPORT_SUFFIXES if name.endswith(s)), None)
    table = path.with_name(name.removesuffix(suffix) + ".json") if suffix else None
    return table if table is not None and table.is_file() else None


def export_sweep(path: Path) -> Path | None:
    """The sweep an export was tuned from: the run directory in the provenance of its table
    (export_table), or None where the table or its run directory is not there."""
    table = export_table(path)
    if table is None:
        return None
    try:
        run_dir = (json.loads(table.read_text()).get("provenance") or {}).get("run_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(run_dir) if run_dir and Path(run_dir).is_dir() else None


# --- the corrected export ------------------------------------------------------------------

# What the corrected export keeps at a size, and why (the notes say it per size).
KEPT_CONFIRMED = "the file's departure, confirmed by the C client"
TAKEN_BEST = "the C client's confirmed best choice"
KEPT_DEFAULT = "no departure confirmed by the C client"


@dataclass(frozen=True)
class Correction:
    """One (collective, p, size) of the corrected export: the choice written there
    (LIBRARY_DEFAULT: MPICH decides), why, and the C client's ratio behind it."""

    where: tuple  # (collective, p, size)
    alg: str
    why: str
    ratio: Ratio
    null: Ratio | None


def corrections(file_verdicts: list[SizeVerdict], best: list[BestChoice]) -> list[Correction]:
    """Per size of the C client: the file's departure where the C client confirms it beyond
    the null control; else the best measured choice where the C client confirms it (the
    decision rule's pick, beyond the null control); else the default. Every departure the
    result keeps is one the C client confirmed."""
    bests = {tuple(b.where): b for b in best if b.confirmed}
    found = []
    for v in file_verdicts:
        where = tuple(v.where)
        # A departure the file makes through a path no single candidate runs cannot be
        # written as one candidate's choice: the default (or the best choice) stands there.
        if v.departs and v.confirmed and mpich_layers.is_candidate(where[0], str(v.says)):
            found.append(Correction(where, str(v.says), KEPT_CONFIRMED, v.file, v.null))
        elif where in bests:
            b = bests[where]
            found.append(Correction(where, str(b.choice), TAKEN_BEST, b.ratio, b.null))
        else:
            found.append(Correction(where, LIBRARY_DEFAULT, KEPT_DEFAULT, v.file, v.null))
    return found


def corrected_table(
    table: TuningTable, found: list[Correction], shape_of: ShapeOf = one_node
) -> TuningTable:
    """``table`` with its MPICH library decisions (header LIBRARY_TUNING) replaced by the
    corrections, in the entries of the job shape the C client ran (``shape_of``: the nodes
    a job of p ranks spanned) only: per collective and p, a range per run of sizes with one
    choice, from 0 up, the last open, each point carrying the C client's ratio as its
    evidence. Other entries are kept as exported (uncorrected_lines)."""
    tuning = dict(table.header.get(LIBRARY_TUNING) or {})
    if tuning.get("library") != "mpich":
        raise UsageError("the corrected export is written for MPICH tables only")
    by_entry: dict[tuple[str, int], list[Correction]] = {}
    for c in sorted(found, key=lambda c: c.where):
        by_entry.setdefault((str(c.where[0]), int(c.where[1])), []).append(c)
    entries = []
    for item in tuning.get("entries") or []:
        key = (item["collective"], int(item["nprocs"]))
        if _client_ran(item, by_entry, shape_of):
            item = {**item, "ranges": _ranges(by_entry.pop(key))}
        entries.append(item)
    header = {**table.header, LIBRARY_TUNING: {**tuning, "entries": entries}}
    return replace(table, header=header)


def _client_ran(item: dict[str, Any], ran: Container[tuple], shape_of: ShapeOf) -> bool:
    """Whether the C client ran a table entry's collective, p, nodes and (host) device."""
    nprocs = int(item["nprocs"])
    return (
        item["device"] == "cpu"
        and (item["collective"], nprocs) in ran
        and int(item["nodes"]) == shape_of(nprocs).nodes
    )


def uncorrected_lines(
    table: TuningTable, found: list[Correction], shape_of: ShapeOf = one_node
) -> list[str]:
    """The table's library entries corrected_table keeps as exported, one line each with
    why: the C client did not run their collective and p, or ran them in another shape."""
    ran = {(str(c.where[0]), int(c.where[1])) for c in found}
    lines = []
    for item in (table.header.get(LIBRARY_TUNING) or {}).get("entries") or []:
        if _client_ran(item, ran, shape_of):
            continue
        nprocs = int(item["nprocs"])
        where = f"{item['collective']} p={nprocs} on {item['nodes']} node(s), {item['device']}"
        why = (
            f"the C client ran p={nprocs} on {shape_of(nprocs).nodes} node(s)"
            if (item["collective"], nprocs) in ran and item["device"] == "cpu"
            else "the C client did not run it"
        )
        lines.append(f"kept as exported, not corrected: {where} ({why})")
    return lines


def _ranges(found: list[Correction]) -> list[dict[str, Any]]:
    """Runs of sizes with one choice as LIBRARY_TUNING ranges (tune's shape)."""
    ranges: list[dict[str, Any]] = []
    for c in found:
        point = {
            "size_bytes": int(c.where[2]),
            "alg": c.alg,
            "ratio": c.ratio.ratio,
            "ratio_low": c.ratio.low,
            "ratio_high": c.ratio.high,
            "launches": c.ratio.launches,
            "evidence": "c client",
        }
        if ranges and ranges[-1]["alg"] == c.alg:
            ranges[-1]["points"].append(point)
            continue
        if ranges:
            ranges[-1]["max_bytes"] = int(c.where[2])
        ranges.append({"min_bytes": 0 if not ranges else int(c.where[2]), "alg": c.alg})
        ranges[-1]["points"] = [point]
    if ranges:
        ranges[-1]["max_bytes"] = None
    return ranges


def correction_lines(found: list[Correction]) -> list[str]:
    """The C client's evidence per size of the corrected export, one line each."""
    return [
        f"c client: {c.where[0]} p={c.where[1]} {format_size(int(c.where[2]))}: "
        f"{c.alg if c.alg != LIBRARY_DEFAULT else 'MPICH default'} ({c.why}); "
        f"time/default {c.ratio.ratio:.2f} (95% CI {bound_text(c.ratio.low)}-"
        f"{bound_text(c.ratio.high)}, {c.ratio.launches} launches)"
        + (
            f", null control {c.null.ratio:.2f} ({bound_text(c.null.low)}-"
            f"{bound_text(c.null.high)})"
            if c.null is not None
            else ""
        )
        for c in found
    ]
