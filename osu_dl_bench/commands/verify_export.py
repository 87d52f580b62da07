"""``osu-dl-bench verify-export FILE``: the MPI library's plain collectives (native, no
Python algorithm) with an exported selection file loaded and without it, in launches of
their own, interleaved, through the sweep's machinery; then, per size, the speedup the file
gives with its 95% interval, and the proof that the library used the file (both
selection.exports.verification's; the file read back through selection.exports.readers).
A mismatch means the library did not apply the file: exit 1.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from collectives import mpit
from collectives.units import doubling_sizes, format_size
from osu_dl_bench.commands.verify_export_cli import VerifyExportConfig, sweep_config
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.c_client import (
    ClientRun,
    build_client,
    client_argv,
    omb_binary,
    run_client,
)
from osu_dl_bench.jobs.launch import library_environment
from osu_dl_bench.jobs.orchestrate import run_sweep
from osu_dl_bench.jobs.sweep_config import SweepConfig
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.selection.exports.readers import (
    Reader,
    file_library,
    file_reader,
    named_algorithms,
)
from osu_dl_bench.selection.exports.verification import (
    Fingerprinted,
    Paired,
    Proof,
    client_pairs,
    file_ratios,
    prove,
    slower_with_file,
    sweep_pairs,
)
from osu_dl_bench.selection.paired import Ratio, bound_text, seed_of


def _where(check: Fingerprinted) -> str:
    return f"p={check.nprocs} launch {check.launch} {format_size(check.size)}"


def proof_lines(proof: Proof, library: str) -> list[str]:
    """The proof's verdict in words."""
    if proof.mismatches:
        return [
            f"the file did NOT take effect: {len(proof.mismatches)} of {proof.checked} "
            "fingerprints differ from the algorithm it names",
            *(f"  {mismatch_text(m)}" for m in proof.mismatches[:10]),
        ]
    if not proof.checked:
        return [f"no fingerprint recorded: cannot prove that {library} used the file"]
    if not proof.distinguishable:
        return [
            f"the file keeps or matches {library}'s default at every fingerprinted size "
            f"({proof.checked} checked): consistent, but nothing to tell apart"
        ]
    return [
        f"the file took effect: {proof.checked} allreduce fingerprints match the algorithm "
        f"it names, {proof.distinguishable} of them distinct from the default's"
    ]


def mismatch_text(check: Fingerprinted) -> str:
    """'p=2 launch 1 64K: expected ring's': where the file's fingerprint was another's."""
    return f"{_where(check)}: expected {check.algorithm or 'the default'}'s"


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


def comparison_lines(client: str, found: list[Paired], reader: Reader) -> list[str]:
    """Per (collective, p, size): the file's speedup over the default with its interval
    (selection.exports.verification.file_ratios); and the count of sizes slower with the
    file beyond the interval."""
    ratios = file_ratios(client, found)
    lines = []
    for (where, _), ratio in zip(found, ratios, strict=True):
        says = reader(where[0], int(where[1]), int(where[2])) or "default"
        lines.append(_line(client, where, says, ratio))
    slower = sum(map(slower_with_file, ratios))
    lines.append(
        f"# {client}: {len(found)} sizes, {slower} slower with the file beyond the interval"
    )
    return lines


def client_binaries(cfg: VerifyExportConfig, sweep: SweepConfig) -> dict[str, Path]:
    """collective -> the C client to run: OMB's where --omb names them, else ours, built
    with the library's mpicc into the run directory."""
    if cfg.omb:
        return {c: omb_binary(cfg.omb, c) for c in sweep.collectives}
    built = build_client(cfg.mpi, Path(sweep.output) / "c_client")
    return dict.fromkeys(sweep.collectives, built)


def measure_client(
    cfg: VerifyExportConfig, library: str, sweep: SweepConfig, binaries: dict[str, Path]
) -> dict:
    """Alternate the C client's launches without and with the file (the pair's order
    shuffled, seeded): (collective, p, size, with_file) -> {launch: mean latency (us)}."""
    with_file = mpit.selection_file_environment(library, str(cfg.path.resolve()))
    rng = random.Random(seed_of(str(cfg.path), cfg.client_launches))
    latencies: dict[tuple, dict[int, float]] = {}
    launches = cfg.client_launches
    for launch in range(1, launches + 1):
        for nprocs in sweep.nprocs:
            for collective in sweep.collectives:
                argv = client_argv(
                    binaries[collective], collective, sweep.min_size, sweep.max_size, bool(cfg.omb)
                )
                for loaded in rng.sample([False, True], 2):
                    env = {**library_environment(cfg.mpi), **(with_file if loaded else {})}
                    what = (
                        f"launch {launch}/{launches}, p={nprocs}, {collective}, "
                        f"{'with' if loaded else 'without'} the file"
                    )
                    run = ClientRun(
                        argv, nprocs, what, cfg.client_timeout, sweep.min_size, sweep.max_size
                    )
                    seen = run_client(run, env, cfg.mpi)
                    for size, us in seen.items():
                        latencies.setdefault((collective, nprocs, size, loaded), {})[launch] = us
    return latencies


def run_verify_export(cfg: VerifyExportConfig) -> int:
    """Measure, report the speedups and the proof; exit 1 if the file did not take effect."""
    path, run_dir = cfg.path, cfg.run_dir
    library = file_library(path)
    reader = file_reader(path, library)
    probe = sweep_config(cfg, run_dir, [])
    # The C client is built (or OMB's found) before anything is measured: a missing
    # compiler is one message up front, not the loss of a finished sweep's report.
    binaries = client_binaries(cfg, probe) if cfg.client == "c" else {}
    # The file is read at the sweep's sizes, lo, 2 lo, ... up to hi, from size 1 on.
    sizes = doubling_sizes(max(probe.min_size, 1), probe.max_size)
    code = run_sweep(sweep_config(cfg, run_dir, named_algorithms(reader, probe.nprocs, sizes)))
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
    print("\n".join([*lines, *proof_lines(proof, library)]), flush=True)
    if binaries:
        latencies = measure_client(cfg, library, probe, binaries)
        print("\n".join(comparison_lines("c", client_pairs(latencies), reader)), flush=True)
    return 1 if proof.mismatches else 0
