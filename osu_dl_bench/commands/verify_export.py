"""``osu-dl-bench verify-export FILE``: the MPI library's plain collectives (native, no
Python algorithm) with an exported selection file loaded and without it, in launches of
their own, interleaved, through the sweep's machinery (the file's launches are the
isolation group 'library_file'); then, per size, the speedup the file gives with its 95%
interval (selection.paired: the two groups paired by launch medians), and the proof that
the library used the file.

Proof (MPICH): each algorithm the file names also runs forced (native:alg=NAME, launches
of its own), and every launch records the allreduce fingerprints (collectives.mpit.
fingerprints: a reduction declared commutative that is not, so the result shows which
algorithm combined it) at every size. The file took effect where, at every size, its
fingerprint is that of the algorithm it names there (or the default's where it keeps the
default); it is proven where at least one such algorithm's fingerprint differs from the
default's. A mismatch means the library did not apply the file: exit 1.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from collectives import mpit
from collectives.units import format_size
from osu_dl_bench.commands.sweep_options import add_sweep_arguments, config_from_args
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.c_client import build_client, client_argv, omb_binary, run_client
from osu_dl_bench.jobs.launch import library_environment
from osu_dl_bench.jobs.orchestrate import run_sweep
from osu_dl_bench.jobs.plan import FILE_GROUP, FORCED_PREFIX, MPI_GROUP
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.selection.estimate import pooled_ratios
from osu_dl_bench.selection.evidence import LaunchValues, Observation, launch_values
from osu_dl_bench.selection.exports.mpich import file_algorithm
from osu_dl_bench.selection.exports.openmpi import parse_classic, rules_algorithm
from osu_dl_bench.selection.paired import Ratio, bound_text, seed_of
from osu_dl_bench.selection.tune import series_of, usable_rows

# Seconds one launch of the C client may take (every size of one collective).
CLIENT_TIMEOUT = 600.0
# (collective, nprocs, size in bytes) -> the library algorithm a file names there, None
# where it leaves the library's default.
Reader = Callable[[str, int, int], "str | None"]


def file_library(path: Path) -> str:
    """'mpich' (an MPICH csel JSON file) or 'openmpi' (a classic rules file), from the file."""
    if path.suffix == ".rules":
        return "openmpi"
    if path.name.endswith(".openmpi.json"):
        raise UsageError(f"{path}: give the classic .openmpi.rules file beside it (Open MPI 5)")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{path}: expected an exported .mpich.json or .openmpi.rules file ({exc})"
        ) from None
    if isinstance(data, dict) and any(str(k).startswith("collective=") for k in data):
        return "mpich"
    raise UsageError(f"{path}: not an MPICH selection file (no 'collective=' keys)")


def _doubling(lo: int, hi: int) -> list[int]:
    sizes, size = [], max(lo, 1)
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def file_reader(path: Path, library: str) -> Reader:
    """What the file names where: MPICH's selection tree or Open MPI's classic rules."""
    text = path.read_text()
    if library == "mpich":
        tree = json.loads(text)
        return lambda collective, p, size: file_algorithm(tree, collective, p, size)
    try:
        parse_classic(text)
    except (StopIteration, ValueError):
        raise UsageError(f"{path}: not a classic Open MPI rules file") from None
    return lambda collective, p, size: rules_algorithm(text, collective, p, size)


def named_algorithms(reader: Reader, nprocs: tuple[int, ...], sizes: list[int]) -> list[str]:
    """The allreduce algorithms a file names at these process counts and sizes."""
    found = {reader("allreduce", p, s) for p in nprocs for s in sizes}
    return sorted(a for a in found if a is not None)


def _sweep_config(args: argparse.Namespace, path: Path, run_dir: str, algs: list[str]):
    """The sweep that measures plain native with and without the file."""
    parser = argparse.ArgumentParser(prog="osu-dl-bench verify-export")
    add_sweep_arguments(parser)
    # Each algorithm the file names runs forced in launches of its own (native:alg=NAME):
    # their fingerprints are what the file's launches must show where it names them.
    candidates = ",".join(["native", *(f"native:alg={alg}" for alg in algs)])
    argv = [
        *("-o", run_dir, "--np", args.np, "--collectives", args.collectives),
        *("-m", args.message_size, "-a", candidates, "--launches", str(args.launches)),
        *("--budget", repr(args.budget), "--no-calibration"),
        *("--library-file", str(path)),
        *(["--mpi", args.mpi] if args.mpi else []),
    ]
    return config_from_args(parser.parse_args(argv))


@dataclass
class Proof:
    """What the fingerprints say: sizes where the file's algorithm was seen (and could be
    told from the default), and mismatches (the file not applied)."""

    seen: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    distinguishable: int = 0
    checked: int = 0

    def lines(self, library: str) -> list[str]:
        """The verdict in words."""
        if self.mismatches:
            return [
                f"the file did NOT take effect: {len(self.mismatches)} of {self.checked} "
                "fingerprints differ from the algorithm it names",
                *(f"  {m}" for m in self.mismatches[:10]),
            ]
        if not self.checked:
            return [f"no fingerprint recorded: cannot prove that {library} used the file"]
        if not self.distinguishable:
            return [
                f"the file keeps or matches {library}'s default at every fingerprinted size "
                f"({self.checked} checked): consistent, but nothing to tell apart"
            ]
        return [
            f"the file took effect: {self.checked} allreduce fingerprints match the algorithm "
            f"it names, {self.distinguishable} of them distinct from the default's"
        ]


def _fingerprints(entries: dict[str, Any], launch: int, group: str) -> dict[str, Any]:
    """A launch's recorded fingerprints (size text -> every rank's hash)."""
    return entries.get(f"{launch}/{group}", {}).get("fingerprints") or {}


def prove(metadata: dict[str, Any], reader: Reader, launches: int) -> Proof:
    """Compare each launch's fingerprints with and without the file (see the module text)."""
    proof = Proof()
    for nprocs, job in sorted((metadata.get("jobs") or {}).items()):
        entries = job.get("launches") or {}
        for launch in range(1, launches + 1):
            plain = _fingerprints(entries, launch, MPI_GROUP)
            for size, seen in _fingerprints(entries, launch, FILE_GROUP).items():
                alg = reader("allreduce", int(nprocs), int(size))
                reference = (
                    plain if alg is None else _fingerprints(entries, launch, FORCED_PREFIX + alg)
                )
                expected = reference.get(size)
                if expected is None:
                    continue
                proof.checked += 1
                where = f"p={nprocs} launch {launch} {format_size(int(size))}"
                if seen != expected:
                    proof.mismatches.append(f"{where}: expected {alg or 'the default'}'s")
                elif alg is not None and expected != plain.get(size):
                    proof.distinguishable += 1
                    proof.seen.append(f"{where}: {alg}")
    return proof


HEADER = (
    f"{'client':<8}{'collective':<11}{'p':>3}{'size':>8}  {'file says':<28}"
    "speedup  95% CI       launches"
)


def _inverse(value: float) -> float:
    """1 / value, with 1/0 = inf and 1/inf = 0 (an interval without a bound)."""
    return math.inf if value == 0 else 1 / value


def _line(client: str, where: tuple, says: str, ratio: Ratio) -> str:
    collective, nprocs, size = where
    interval = f"{bound_text(_inverse(ratio.high))}-{bound_text(_inverse(ratio.low))}"
    return (
        f"{client:<8}{collective:<11}{nprocs:>3}{format_size(int(size)):>8}  {says:<28}"
        f"{1 / ratio.ratio:>6.2f}  {interval:<12}{ratio.launches:>8}"
    )


def comparison_lines(client: str, found: list[tuple[tuple, LaunchValues]], reader: Reader):
    """Per (collective, p, size): the file's speedup over the default with its interval,
    the launch-to-launch variance pooled over every size (selection.estimate); and the
    count of sizes slower with the file beyond the interval."""
    # One pool per client, collective and p: launches at p = 4 swing more than at p = 2.
    observations = [Observation((client, *w[:2]), client, int(w[2]), v) for w, v in found]
    lines, slower = [], 0
    for (where, _), ratio in zip(found, pooled_ratios(observations), strict=True):
        says = reader(where[0], int(where[1]), int(where[2])) or "default"
        lines.append(_line(client, where, says, ratio))
        slower += ratio.low > 1
    lines.append(
        f"# {client}: {len(found)} sizes, {slower} slower with the file beyond the interval"
    )
    return lines


def sweep_pairs(frame: pd.DataFrame) -> list[tuple[tuple, LaunchValues]]:
    """The sweep's native with the file against without it, per (collective, p, size)."""
    rows = usable_rows(frame)
    native = rows[rows["algorithm"] == "native"]
    found = []
    keys = ["collective", "nprocs", "size_bytes"]
    for where, at in native.groupby(keys, sort=True):
        default, loaded = (at[at["group"] == g] for g in (MPI_GROUP, FILE_GROUP))
        if default.empty or loaded.empty:
            continue
        values = launch_values(series_of(loaded), series_of(default))
        if values is not None:
            found.append((where, values))
    return found


def client_pairs(latencies: dict[tuple, dict[int, float]]) -> list[tuple[tuple, LaunchValues]]:
    """The C client's launches as per-launch log-ratios, with the file over without it:
    ``latencies`` maps (collective, p, size, with_file) to {launch: us}."""
    found = []
    for (collective, nprocs, size, with_file), loaded in sorted(latencies.items()):
        if not with_file:
            continue
        default = latencies.get((collective, nprocs, size, False), {})
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


def client_binaries(args: argparse.Namespace, cfg) -> dict[str, Path]:
    """collective -> the C client to run: OMB's where --omb names them, else ours, built
    with the library's mpicc into the run directory."""
    if args.omb:
        return {c: omb_binary(args.omb, c) for c in cfg.collectives}
    built = build_client(args.mpi, Path(cfg.output) / "c_client")
    return dict.fromkeys(cfg.collectives, built)


def measure_client(args: argparse.Namespace, path: Path, library: str, cfg, binaries) -> dict:
    """Alternate the C client's launches without and with the file (the pair's order
    shuffled, seeded): (collective, p, size, with_file) -> {launch: mean latency (us)}."""
    with_file = mpit.selection_file_environment(library, str(path.resolve()))
    rng = random.Random(seed_of(str(path), args.client_launches))
    latencies: dict[tuple, dict[int, float]] = {}
    for launch in range(1, args.client_launches + 1):
        for nprocs in cfg.nprocs:
            for collective in cfg.collectives:
                argv = client_argv(
                    binaries[collective], collective, cfg.min_size, cfg.max_size, bool(args.omb)
                )
                for loaded in rng.sample([False, True], 2):
                    env = {**library_environment(args.mpi), **(with_file if loaded else {})}
                    seen = run_client(argv, nprocs, env, args.mpi, CLIENT_TIMEOUT)
                    for size, us in seen.items():
                        latencies.setdefault((collective, nprocs, size, loaded), {})[launch] = us
    return latencies


def run_verify_export(args: argparse.Namespace) -> int:
    """Measure, report the speedups and the proof; exit 1 if the file did not take effect."""
    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"{args.file}: no such file (expected an exported selection file)")
    library = file_library(path)
    reader = file_reader(path, library)
    run_dir = args.output or str(path.with_name(path.name + ".verify"))
    probe = _sweep_config(args, path, run_dir, [])
    # The C client is built (or OMB's found) before anything is measured: a missing
    # compiler is one message up front, not the loss of a finished sweep's report.
    binaries = client_binaries(args, probe) if args.client == "c" else {}
    algs = named_algorithms(reader, probe.nprocs, _doubling(probe.min_size, probe.max_size))
    code = run_sweep(_sweep_config(args, path, run_dir, algs))
    if code != 0:
        return code
    store = RunStore(run_dir)
    metadata = store.read_metadata()
    ran = mpit.library_of(str(metadata.get("mpi_library") or ""))
    if ran != library:
        raise UsageError(f"{path} is a {library} file, but the jobs ran {ran or 'another MPI'}")
    frame, _ = store.read()
    proof = prove(metadata, reader, probe.launches)
    lines = [f"# {path}: {library} with the file against without it, {run_dir}", HEADER]
    lines += comparison_lines("python", sweep_pairs(frame), reader)
    print("\n".join([*lines, *proof.lines(library)]), flush=True)
    if binaries:
        latencies = measure_client(args, path, library, probe, binaries)
        print("\n".join(comparison_lines("c", client_pairs(latencies), reader)), flush=True)
    return 1 if proof.mismatches else 0
