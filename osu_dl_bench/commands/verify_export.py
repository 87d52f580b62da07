"""``osu-dl-bench verify-export FILE``: the MPI library's plain collectives (native, no
Python algorithm) with an exported selection file loaded and without it, in launches of
their own, interleaved, through the sweep's machinery; then the C client's three arms (the
file, the default, and the null control: the default loaded through a selection file of
its own) alternated over many short launches. Per size: the speedup the file and the null
control give with their 95% intervals, and the verdict (selection.exports.verification:
a departure from the default counts as a gain only where it is confirmed beyond the null
control's spread), with the proof that the library used the file (the file read back
through selection.exports.readers).

With --best-of-candidates (MPICH, on by default where the sweep the export was tuned from
is found) the C client also runs each candidate that sweep measured, as an arm of its
own: the best choice per size, and the share of its speedup the file captures.

Exit 1: the library did not apply the file. Exit 3 (REFUSED): it applied, but the file
departs from the default at sizes where the C client confirms no gain: the export is
refused there, each size listed with the reason. With --write-corrected BASE the export is
written again with only the departures the C client confirms (exit 0 then).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from collectives import mpit
from collectives.shape import JobShape
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
from osu_dl_bench.jobs.launch import expected_shape, library_environment
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
from osu_dl_bench.runtime.mpich_trees import candidate_files_env
from osu_dl_bench.selection.exports import mpich
from osu_dl_bench.selection.exports.common import LIBRARY_DEFAULT
from osu_dl_bench.selection.exports.readers import (
    ShapeOf,
    file_library,
    file_reader,
    named_algorithms,
    one_node,
)
from osu_dl_bench.selection.exports.verification import (
    CLIENT_FILE,
    DEFAULT_ARM,
    FILE_ARM,
    NULL_ARM,
    TAKEN_BEST,
    BestChoice,
    CapturedShare,
    Fingerprinted,
    MeasuredCandidates,
    Proof,
    SizeVerdict,
    arm_order,
    best_choices,
    captured_share,
    client_arms,
    client_records,
    client_verdicts,
    corrected_table,
    correction_lines,
    corrections,
    export_sweep,
    export_table,
    measured_candidates,
    null_control_environment,
    own_code_only,
    prove,
    speedup_interval,
    summarize,
    sweep_pairs,
    uncorrected_lines,
    verdicts,
)
from osu_dl_bench.selection.paired import Ratio, seed_of
from osu_dl_bench.selection.table import load_table
from osu_dl_bench.stats.bootstrap import MIN_LAUNCHES


@dataclass(frozen=True)
class VerifyExportConfig:
    """The exported file and how to measure it: the sweep's --np, -m and --collectives as
    given (the sweep checks them), launches and budget, the MPI library, the C client
    (c or none; OMB's binaries' directory, its launches), the run directory, and whether
    the C client also runs the candidates of the sweep the export came from."""

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
    # None: run the sweep's candidates where the sweep is found (MPICH); True: required.
    best_of_candidates: bool | None = None
    sweep: str | None = None
    write_corrected: str | None = None

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
    cfg: VerifyExportConfig,
    library: str,
    sweep: SweepConfig,
    binaries: dict[str, Path],
    measured: MeasuredCandidates | None = None,
) -> dict:
    """The C client's arms (the file, the default, the null control: the default loaded
    through a selection file of its own; and one per candidate of ``measured``, loading its
    files as the sweep did), one short launch each per launch round, in the seeded Williams
    order of verification.arm_order, run by the experiment engine (jobs.orchestrate;
    JobFailed(130) when interrupted): (collective, p, size, arm) -> {launch: mean latency
    (us)}. A collective with k arms gets cfg.client_launches rounded up to whole cycles of
    k arms' design; a candidate's launches run only the sizes the sweep measured it at."""
    measured = measured or {}
    environments = {
        FILE_ARM: mpit.selection_file_environment(library, str(cfg.path.resolve())),
        DEFAULT_ARM: {},
        NULL_ARM: null_control_environment(library, Path(sweep.output) / "null_control"),
    }
    plans = {
        (nprocs, collective): client_arms(list(measured.get((collective, nprocs), {})))
        for nprocs in sweep.nprocs
        for collective in sweep.measure.collectives
    }
    # One seed per file and launch count: a rerun takes the same order.
    seed = seed_of(str(cfg.path), cfg.client_launches)
    latencies: dict[tuple, dict[int, float]] = {}
    turns: dict[JobKey, tuple[str, str, int]] = {}  # job -> (collective, arm, its launches)
    # Per (p, collective): its launches (whole cycles of its arms' design) and where in the
    # design it starts, drawn once from the seed.
    designs = {
        key: (
            client_launches_of(cfg.client_launches, len(arms)),
            random.Random(seed).randrange(williams_cycle(len(arms))),
        )
        for key, arms in plans.items()
    }
    rounds = max(launches for launches, _ in designs.values())
    for launch in range(1, rounds + 1):
        for (nprocs, collective), arms in plans.items():
            launches, start = designs[(nprocs, collective)]
            if launch > launches:
                continue
            for arm in arm_order(launch, start, arms):
                turns[(nprocs, launch, f"{collective}_{arm}")] = (collective, arm, launches)

    def measure(job: JobKey, progress: Progress) -> JobOutcome:
        (nprocs, launch, _), (collective, arm, launches) = job, turns[job]
        sizes = measured.get((collective, nprocs), {}).get(arm)
        whole = (sweep.measure.min_size, sweep.measure.max_size)
        lo, hi = (min(sizes), max(sizes)) if sizes else whole
        argv = client_argv(binaries[collective], collective, lo, hi, bool(cfg.omb))
        own = (
            environments[arm]
            if arm in environments
            else candidate_environment(sweep, collective, arm)
        )
        env = {**library_environment(cfg.mpi), **own}
        what = f"launch {launch}/{launches}, p={nprocs}, {collective}, {arm_text(arm)}"
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


def client_launches_of(asked: int, arms: int) -> int:
    """The C client's launches of ``arms`` arms: ``asked`` rounded up to whole cycles of
    their Williams design (measurement.schedule.williams_cycle)."""
    cycle = williams_cycle(arms)
    return -(-asked // cycle) * cycle


def candidate_environment(sweep: SweepConfig, collective: str, alg: str) -> dict[str, str]:
    """A measured candidate's arm: MPICH's generic trees with its one change, as files,
    written by the function the sweep's launches use (runtime.mpich_trees.
    candidate_files_env)."""
    directory = Path(sweep.output) / "candidates" / f"{collective}_{alg}"
    return candidate_files_env(directory, {collective: alg})


def arm_text(arm: str) -> str:
    """An arm in words, for the progress line."""
    return ARM_TEXT.get(arm, f"candidate {arm} (the generic trees with its one change)")


def candidates_to_run(
    cfg: VerifyExportConfig,
    library: str,
    sweep: SweepConfig,
    shape_of: ShapeOf | None = None,
) -> MeasuredCandidates:
    """The sweep's measured candidates the C client also runs (--best-of-candidates): MPICH's
    layered candidates in the sweep of --sweep, or of the export's table's provenance, at the
    run's process counts and collectives, at the sizes where they run code of their own in
    this run's job shape (``shape_of``: the nodes a job of p ranks spans; the sweep's
    expected_shape where None); none for Open MPI (its rules-file candidates are not run),
    with --no-best-of-candidates, or where no sweep is found unless asked for."""
    if cfg.best_of_candidates is False or library != "mpich":
        if cfg.best_of_candidates and library != "mpich":
            raise UsageError("--best-of-candidates: only MPICH's layered candidates are run")
        return {}
    found = Path(cfg.sweep) if cfg.sweep else export_sweep(cfg.path)
    if found is None or not (found / "results.csv").is_file():
        if cfg.best_of_candidates or cfg.sweep:
            raise UsageError(
                f"--best-of-candidates: no sweep found for {cfg.path} (its table's provenance "
                f"names none that is there{f', nor is {cfg.sweep}' if cfg.sweep else ''}): "
                "name it with --sweep DIR"
            )
        print(f"# no sweep found for {cfg.path}: the C client runs no candidates", flush=True)
        return {}
    frame, _ = RunStore(found).read()
    measured: MeasuredCandidates = {}
    for key, algs in measured_candidates(frame).items():
        if key[0] not in sweep.measure.collectives or key[1] not in sweep.nprocs:
            continue
        # Only the sizes this run measures: -m narrows the candidates' launches too.
        low, high = sweep.measure.min_size, sweep.measure.max_size
        within = {
            alg: kept
            for alg, sizes in algs.items()
            if (kept := tuple(s for s in sizes if low <= s <= high))
        }
        if within:
            measured[key] = within
    # Where a candidate runs the default's code it is no choice of its own: neither run
    # nor judged there.
    measured, skipped = own_code_only(measured, shape_of or job_shapes(sweep))
    print(f"# the C client also runs the candidates {found} measured: {_listed(measured)}")
    if skipped:
        print("\n".join(skipped), flush=True)
    return measured


def _listed(measured: MeasuredCandidates) -> str:
    """'allreduce p=2: ch4_beta (4M-16M), posix_mpir (8-16M); ...' or 'none'."""
    parts = [
        f"{c} p={p}: " + ", ".join(f"{alg} ({_span(s)})" for alg, s in sorted(algs.items()))
        for (c, p), algs in sorted(measured.items())
    ]
    return "; ".join(parts) or "none"


def _span(sizes: tuple[int, ...]) -> str:
    """'4K-16M': the smallest and largest of ``sizes``."""
    return f"{format_size(min(sizes))}-{format_size(max(sizes))}"


def best_lines(
    best: list[BestChoice],
    found: list[SizeVerdict],
    latencies: dict[tuple, dict[int, float]],
) -> list[str]:
    """Per size where candidates ran: the rule's pick and its speedup over the default with
    the intervals; then the share of the confirmed best choices' speedup the file captures,
    per collective and p and over all, with the sizes it rests on."""
    lines = [
        "# c: the best measured choice per size (the decision rule's pick among the sweep's "
        "candidates and the default, each loaded through its files; C client):",
        f"{'client':<8}{'collective':<11}{'p':>3}{'size':>8}  {'best choice':<28}"
        "speedup  95% CI       launches  null    95% CI       verdict",
    ]
    for b in best:
        collective, nprocs, size = b.where
        null = _speedup(b.null) if b.null is not None else f"{'-':>6}  {'':<12}"
        verdict = (
            "confirmed" if b.confirmed else ("default" if b.choice is None else "not confirmed")
        )
        lines.append(
            f"{'c':<8}{collective:<11}{nprocs:>3}{format_size(int(size)):>8}  "
            f"{b.choice or 'default':<28}{_speedup(b.ratio)}{b.ratio.launches:>8}  {null}{verdict}"
        )
    groups = sorted({tuple(b.where[:2]) for b in best})
    for key in [*groups, None]:
        chosen = [b for b in best if key is None or tuple(b.where[:2]) == key]
        label = "all" if key is None else f"{key[0]} p={key[1]}"
        lines.append(share_line(label, captured_share(found, chosen, latencies)))
    return lines


def share_line(label: str, share: CapturedShare) -> str:
    """'# c: captured share (allreduce p=2): 87.1% (95% CI 70.2-95.3%) of ...' or the line
    saying it is undefined."""
    if not share.sizes:
        return (
            f"# c: captured share ({label}): undefined: no size has a best choice confirmed "
            "faster than the default beyond the null control"
        )
    sizes = ", ".join(f"{c} p={p} {format_size(int(s))}" for c, p, s in share.sizes)
    return (
        f"# c: captured share ({label}): {100 * share.share:.1f}% ({_share_interval(share)}) "
        "of the speedup of the "
        f"confirmed best choices (sum log(default/file) {share.captured:.3f} over sum "
        f"log(default/best) {share.available:.3f}), over {len(share.sizes)} sizes: {sizes}"
    )


def _share_interval(share: CapturedShare) -> str:
    """'95% CI 70.2-95.3%', or why there is none."""
    if math.isnan(share.low):
        return (
            f"no 95% CI: fewer than {MIN_LAUNCHES} launches, or the best choices' gain "
            "gone in too many resamples"
        )
    apart = " to " if share.low < 0 else "-"  # "-36.4 to 21.0%", not "-36.4-21.0%"
    return f"95% CI {100 * share.low:.1f}{apart}{100 * share.high:.1f}%"


def keep_client_latencies(latencies: dict[tuple, dict[int, float]], run_dir: Path) -> None:
    """The C client's latencies so far, written into the run directory (CLIENT_FILE) after
    each launch: a launch stopped later (its timeout, a failure) loses none of them."""
    records = json.dumps(client_records(latencies), indent=0)
    write_text_atomic(run_dir / CLIENT_FILE, records + "\n")


def job_shapes(sweep: SweepConfig) -> Callable[[int], JobShape]:
    """The shape a job of the sweep's is expected to get, per process count: the nodes it
    spans (OSU_DL_BENCH_HOSTS, Slurm), by which MPICH's layers decide."""
    return lambda nprocs: expected_shape(sweep.launching, nprocs, sweep.measure.emulated_ppn)


def run_verify_export(cfg: VerifyExportConfig) -> int:
    """Measure, report the speedups and the proof; exit 1 if the file did not take effect."""
    path, run_dir = cfg.path, cfg.run_dir
    library = file_library(path)
    probe = sweep_config(cfg, run_dir, [])
    # The nodes each job spans (OSU_DL_BENCH_HOSTS, Slurm): MPICH's layers decide by them.
    shape_of = job_shapes(probe)
    reader = file_reader(path, library, shape_of)
    # The C client is built (or OMB's found) before anything is measured: a missing
    # compiler is one message up front, not the loss of a finished sweep's report.
    binaries = client_binaries(cfg, probe) if cfg.client == "c" else {}
    measured = candidates_to_run(cfg, library, probe, shape_of) if binaries else {}
    if cfg.write_corrected and (library != "mpich" or not binaries or not export_table(path)):
        # Refused before any job: the correction rests on the C client and the export's table.
        raise UsageError(
            "--write-corrected: needs an MPICH export with its table (BASE.json) beside it "
            "and the C client (--client c)"
        )
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
            latencies = measure_client(cfg, library, probe, binaries, measured)
        except JobFailed as stopped:  # interrupted: the engine said what is kept
            return stopped.code
        found = client_verdicts(latencies, reader)
        print("\n".join([HEADER, *comparison_lines("c", found, proof)]), flush=True)
        best = best_choices(latencies, measured) if measured else []
        if best:
            print("\n".join(best_lines(best, found, latencies)), flush=True)
        if cfg.write_corrected:
            print("\n".join(write_corrected(cfg, found, best, shape_of)), flush=True)
        else:
            print("\n".join(refusal_lines(found)), flush=True)
    if proof.mismatches:
        return 1
    # With --write-corrected the export written keeps only the departures the C client
    # confirmed: the refused sizes are corrected, not refused.
    refused = binaries and not cfg.write_corrected and any(v.refused for v in found)
    return REFUSED if refused else 0


def write_corrected(
    cfg: VerifyExportConfig,
    found: list[SizeVerdict],
    best: list[BestChoice],
    shape_of: ShapeOf = one_node,
) -> list[str]:
    """Write the export again at --write-corrected BASE (verification.corrections: the
    file's confirmed departures, the C client's confirmed best choices, the default
    elsewhere) in the entries of the job shape the C client ran (``shape_of``), its table
    BASE.json beside it, the notes ending with the entries kept as exported and the C
    client's evidence per size; the lines that say so."""
    table_path = export_table(cfg.path)
    if table_path is None:
        raise UsageError(
            f"--write-corrected: the table {cfg.path} was exported from is not beside it "
            "(BASE.json): the export is written again from its table"
        )
    base = Path(cfg.write_corrected)
    fixed = corrections(found, best)
    exported = load_table(table_path)
    table = corrected_table(exported, fixed, shape_of)
    table.write(base.with_name(base.name + ".json"))
    paths, warnings = mpich.export(table, base)
    notes = next(p for p in paths if p.name.endswith(mpich.NOTES_SUFFIX))
    kept = uncorrected_lines(exported, fixed, shape_of)
    evidence = [*(f"# {line}" for line in kept)]
    evidence += ["# the C client's evidence per size (verify-export --write-corrected):"]
    evidence += correction_lines(fixed)
    write_text_atomic(notes, notes.read_text() + "\n".join(evidence) + "\n")
    departures = [c for c in fixed if c.alg != LIBRARY_DEFAULT]
    return [
        f"# wrote the corrected export {base}: {len(departures)} departures, each confirmed "
        f"by the C client ({sum(c.why == TAKEN_BEST for c in departures)} of them its best "
        f"choice where the file had none confirmed); the default at the other "
        f"{len(fixed) - len(departures)} sizes; the evidence per size in {notes}",
        *(f"# {line}" for line in kept),
        *(f"# export warning: {w}" for w in warnings),
    ]


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
