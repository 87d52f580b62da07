"""``osu-dl-bench verify-export FILE``: the MPI library's plain collectives (native, no
Python algorithm) with an exported selection file loaded and without it, in launches of
their own, interleaved, through the sweep's machinery; then the C client's three arms (the
file, the default, and the null control: the default loaded through a selection file of
its own) alternated over many short launches. Per size: the speedup the file and the null
control give with their 95% intervals, and the verdict (selection.exports.verification:
a departure from the default counts as a gain only where it is confirmed beyond the null
control's spread), with the proof that the library used the file (the file read back
through selection.exports.readers).

Exit 1: the library did not apply the file. Exit 3 (REFUSED): it applied, but the file
departs from the default at sizes where the C client confirms no gain: the export is
refused there, each size listed with the reason.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path

from collectives import mpit
from collectives.units import doubling_sizes, format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.c_client import (
    DEFAULT_TIMEOUT,
    ClientRun,
    build_client,
    client_argv,
    omb_binary,
    run_client,
)
from osu_dl_bench.jobs.launch import library_environment
from osu_dl_bench.jobs.orchestrate import (
    Experiment,
    JobFailed,
    JobKey,
    JobOutcome,
    run_experiment,
    run_sweep,
)
from osu_dl_bench.jobs.progress import Progress
from osu_dl_bench.jobs.sweep_config import SweepConfig
from osu_dl_bench.measurement.schedule import williams_cycle
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.selection.exports.readers import (
    file_library,
    file_reader,
    named_algorithms,
)
from osu_dl_bench.selection.exports.verification import (
    ARMS,
    CLIENT_FILE,
    DEFAULT_ARM,
    FILE_ARM,
    NULL_ARM,
    Fingerprinted,
    Proof,
    SizeVerdict,
    arm_order,
    client_records,
    client_verdicts,
    null_control_environment,
    prove,
    speedup_interval,
    summarize,
    sweep_pairs,
    verdicts,
)
from osu_dl_bench.selection.paired import Ratio, seed_of


@dataclass(frozen=True)
class VerifyExportConfig:
    """The exported file and how to measure it: the sweep's --np, -m and --collectives as
    given (the sweep checks them), launches and budget, the MPI library, the C client
    (c or none; OMB's binaries' directory, its launches) and the run directory."""

    file: str
    nprocs: str
    message_size: str
    collectives: str
    launches: int
    budget: float
    mpi: str | None
    client: str
    omb: str | None
    client_launches: int
    output: str | None
    client_timeout: float = DEFAULT_TIMEOUT
    resume: bool = False

    @property
    def path(self) -> Path:
        """The exported file."""
        return Path(self.file)

    @property
    def run_dir(self) -> str:
        """-o, or FILE's name + '.verify' beside it."""
        return self.output or str(self.path.with_name(self.path.name + ".verify"))


def sweep_config(cfg: VerifyExportConfig, run_dir: str, algs: list[str]) -> SweepConfig:
    """The sweep that measures plain native with and without the file."""
    from osu_dl_bench.commands import sweep_cli

    parser = argparse.ArgumentParser(prog="osu-dl-bench verify-export")
    sweep_cli.add_arguments(parser)
    # Each algorithm the file names runs forced in launches of its own (native:alg=NAME):
    # their fingerprints are what the file's launches must show where it names them.
    candidates = ",".join(["native", *(f"native:alg={alg}" for alg in algs)])
    # OPTION=VALUE throughout: a value that starts with '-' (a file named '-x.json') stays
    # its option's value.
    argv = [
        f"--output={run_dir}",
        f"--np={cfg.nprocs}",
        f"--collectives={cfg.collectives}",
        f"--message-size={cfg.message_size}",
        f"--algorithms={candidates}",
        f"--launches={cfg.launches}",
        f"--budget={cfg.budget!r}",
        "--no-calibration",
        # The sweep's null control stays on: native measured again in launches of its own
        # (native:null_apart) is the sweep client's A/A pair, judged as the file is.
        f"--library-file={cfg.path}",
        *([f"--mpi={cfg.mpi}"] if cfg.mpi else []),
        # What the sweep's messages advise after a stop ("rerun with --resume").
        *(["--resume"] if cfg.resume else []),
    ]
    return sweep_cli.config_from_args(parser.parse_args(argv))


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
    "speedup  95% CI       launches  null    95% CI       verdict"
)
ARM_TEXT = {
    FILE_ARM: "with the file",
    DEFAULT_ARM: "without it",
    NULL_ARM: "the null control (the default through a file)",
}


def _speedup(ratio: Ratio) -> str:
    """'  1.52  1.21-1.90   ': the speedup over the default and its 95% interval."""
    return f"{1 / ratio.ratio:>6.2f}  {speedup_interval(ratio):<12}"


def verdict_text(verdict: SizeVerdict, proof: Proof | None) -> str:
    """'confirmed (fingerprint proven)', 'REFUSED: ...', 'default', 'default, slower': what
    the size comes to."""
    if not verdict.departs:
        return "default, slower beyond the interval" if verdict.slower else "default"
    collective, nprocs, size = verdict.where
    shown = proof.at(int(nprocs), int(size)) if proof and collective == "allreduce" else ""
    fingerprint = f" (fingerprint {shown})" if shown else ""
    if verdict.confirmed:
        return f"confirmed{fingerprint}"
    return f"REFUSED{fingerprint}: {verdict.reason()}"


def _line(client: str, verdict: SizeVerdict, proof: Proof | None) -> str:
    collective, nprocs, size = verdict.where
    null = _speedup(verdict.null) if verdict.null is not None else f"{'-':>6}  {'':<12}"
    return (
        f"{client:<8}{collective:<11}{nprocs:>3}{format_size(int(size)):>8}  "
        f"{verdict.says or 'default':<28}{_speedup(verdict.file)}{verdict.file.launches:>8}  "
        f"{null}{verdict_text(verdict, proof)}"
    )


def _share(count: int, judged: int) -> str:
    return f"{count} of {judged} sizes ({100 * count / judged:.1f}%)" if judged else "not measured"


def summary_lines(client: str, verdicts: list[SizeVerdict]) -> list[str]:
    """The client's counts: sizes slower than the default beyond the interval with the
    file and with the null control, the null control's false gains, the file's departures
    confirmed and refused."""
    s = summarize(verdicts)
    return [
        f"# {client}: {s.sizes} sizes, {s.slower} slower with the file beyond the interval; "
        f"the null control slower at {_share(s.null_slower, s.null_judged)}",
        f"# {client}: the null control passed for a gain (faster than the default over its "
        f"whole interval) at {_share(s.null_false_gains, s.null_judged)}",
        f"# {client}: the file departs from the default at {s.departures} sizes: "
        f"{s.confirmed} confirmed beyond the null control, {s.departures - s.confirmed} refused",
    ]


def comparison_lines(
    client: str, verdicts: list[SizeVerdict], proof: Proof | None = None
) -> list[str]:
    """Per (collective, p, size): the file's and the null control's speedup over the
    default with their intervals and the size's verdict (selection.exports.verification.
    SizeVerdict), then the client's counts."""
    return [*(_line(client, v, proof) for v in verdicts), *summary_lines(client, verdicts)]


def client_binaries(cfg: VerifyExportConfig, sweep: SweepConfig) -> dict[str, Path]:
    """collective -> the C client to run: OMB's where --omb names them, else ours, built
    with the library's mpicc into the run directory."""
    if cfg.omb:
        return {c: omb_binary(cfg.omb, c) for c in sweep.measure.collectives}
    built = build_client(cfg.mpi, Path(sweep.output) / "c_client")
    return dict.fromkeys(sweep.measure.collectives, built)


def measure_client(
    cfg: VerifyExportConfig, library: str, sweep: SweepConfig, binaries: dict[str, Path]
) -> dict:
    """The C client's three arms (the file, the default, the null control: the default
    loaded through a selection file of its own), one short launch each per launch round,
    in the seeded Williams order of verification.arm_order, run by the experiment engine
    (jobs.orchestrate; JobFailed(130) when interrupted): (collective, p, size, arm) ->
    {launch: mean latency (us)}."""
    environments = {
        FILE_ARM: mpit.selection_file_environment(library, str(cfg.path.resolve())),
        DEFAULT_ARM: {},
        NULL_ARM: null_control_environment(library, Path(sweep.output) / "null_control"),
    }
    # One seed per file and launch count: a rerun takes the same order.
    cycle = williams_cycle(len(ARMS))
    start = random.Random(seed_of(str(cfg.path), cfg.client_launches)).randrange(cycle)
    latencies: dict[tuple, dict[int, float]] = {}
    launches = cfg.client_launches
    lo, hi = sweep.measure.min_size, sweep.measure.max_size
    turns: dict[JobKey, tuple[str, str]] = {}  # the engine's job -> (collective, arm)
    for launch in range(1, launches + 1):
        for nprocs in sweep.nprocs:
            for collective in sweep.measure.collectives:
                for arm in arm_order(launch, start):
                    turns[(nprocs, launch, f"{collective}_{arm}")] = (collective, arm)

    def measure(job: JobKey, progress: Progress) -> JobOutcome:
        (nprocs, launch, _), (collective, arm) = job, turns[job]
        argv = client_argv(binaries[collective], collective, lo, hi, bool(cfg.omb))
        env = {**library_environment(cfg.mpi), **environments[arm]}
        what = f"launch {launch}/{launches}, p={nprocs}, {collective}, {ARM_TEXT[arm]}"
        run = ClientRun(argv, nprocs, what, cfg.client_timeout, lo, hi)
        for size, us in run_client(run, env, cfg.mpi).items():
            latencies.setdefault((collective, nprocs, size, arm), {})[launch] = us
        keep_client_latencies(latencies, Path(sweep.output))
        return JobOutcome(0, finished=True, failures=0)

    kept = f"the C client's latencies so far are kept in {Path(sweep.output) / CLIENT_FILE}"
    order = list(turns)
    # The sweep's run directory: its completion mark stays as the sweep left it.
    client = Experiment(
        sweep.output,
        order,
        dict.fromkeys(order, 1),
        measure,
        _explained,
        progress=False,
        owns_run=False,
        interrupted=kept,
    )
    ended = run_experiment(client)
    if ended.code != 0:
        raise JobFailed(ended.code)
    return latencies


def _explained(job: JobKey, outcome: JobOutcome) -> None:
    """Nothing to add: a C client launch that fails raises its own UsageError."""


def keep_client_latencies(latencies: dict[tuple, dict[int, float]], run_dir: Path) -> None:
    """The C client's latencies so far, written into the run directory (CLIENT_FILE) after
    each launch: a launch stopped later (its timeout, a failure) loses none of them."""
    records = json.dumps(client_records(latencies), indent=0)
    write_text_atomic(run_dir / CLIENT_FILE, records + "\n")


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
    sizes = doubling_sizes(max(probe.measure.min_size, 1), probe.measure.max_size)
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
    found = verdicts("python", sweep_pairs(frame), sweep_pairs(frame, NULL_ARM), reader)
    lines = [f"# {path}: {library} with the file against without it, {run_dir}", HEADER]
    lines += comparison_lines("python", found, proof)
    print("\n".join([*lines, *proof_lines(proof, library)]), flush=True)
    if binaries:
        try:
            latencies = measure_client(cfg, library, probe, binaries)
        except JobFailed as stopped:  # interrupted: the engine said what is kept
            return stopped.code
        found = client_verdicts(latencies, reader)
        print("\n".join([HEADER, *comparison_lines("c", found, proof)]), flush=True)
        print("\n".join(refusal_lines(found)), flush=True)
    if proof.mismatches:
        return 1
    return REFUSED if binaries and any(v.refused for v in found) else 0


# The exit status when the file applied but departs from the default somewhere without a
# gain the C client confirms beyond the null control: those sizes are refused.
REFUSED = 3


def refusal_lines(found: list[SizeVerdict]) -> list[str]:
    """The sizes refused, or one line saying every departure is confirmed."""
    refused = [v for v in found if v.refused]
    if not refused:
        return ["# every departure of the file from the default is confirmed by the C client"]
    return [
        f"# the export is refused at {len(refused)} sizes (exit {REFUSED}): keep the "
        "library's default there (tune again, or edit the file), since the C client "
        "confirms no gain beyond the null control:",
        *(
            f"#   {v.where[0]} p={v.where[1]} {format_size(int(v.where[2]))} "
            f"({v.says}): {v.reason()}"
            for v in refused
        ),
    ]
