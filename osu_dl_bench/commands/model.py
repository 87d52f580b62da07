"""What the ``model`` actions do (options: commands.model_cli). They run as one process, not an
MPI job (``fit`` launches its calibration job itself when the run has no calibration rows
of its sweep's launches), so they print directly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from collectives.shape import JobShape
from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.calibration import CALIBRATION_CSV
from osu_dl_bench.measurement.store import RESULTS, RunStore, collective_rows
from osu_dl_bench.model.platform import Platform, load_platform, with_inter
from osu_dl_bench.model.platform_fit import PLATFORM_FILE, fit_platform, has_calibration
from osu_dl_bench.paths import (
    check_writable_directory,
    check_writable_file,
    write_atomic,
    write_text_atomic,
)
from osu_dl_bench.plotting import require_matplotlib

if TYPE_CHECKING:
    from osu_dl_bench.train.oracle_report import TrainReportRequest

MODULE = "osu_dl_bench.commands.calibration_job"


@dataclass(frozen=True)
class PlatformChoice:
    """--platform (a file, run directory or shipped name; None: the action's default) and
    --inter, the platform whose inter-node link replaces it (None: its own)."""

    platform: str | None
    inter: str | None


@dataclass(frozen=True)
class FitConfig:
    """model fit: the run directory, when to calibrate (auto, always, never) and the
    calibration jobs' process counts, sizes, rounds and limit, whether they add to earlier
    ones, the platform's name (None: the run's) and how the sweep corrects the formulas."""

    run_dir: str
    calibrate: str
    counts: tuple[int, ...]
    message_size: str
    rounds: int
    timeout: float
    append: bool
    name: str | None
    corrections: bool
    state_scaling: str


@dataclass(frozen=True)
class AccuracyConfig:
    """model accuracy: the sweep (run directory or results CSV), the platform (None: the
    run's platform.json) and where the report, the scatter plot and the points go."""

    run_dir: str
    platform: PlatformChoice
    output: str | None
    plot: str | None
    csv: str | None


@dataclass(frozen=True)
class PredictConfig:
    """model predict: the job's shape, the platform, the collectives and sizes, and where
    the predicted table goes (None: nowhere)."""

    layout: JobShape
    platform: PlatformChoice
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    output: str | None


@dataclass(frozen=True)
class TrainModelConfig:
    """model train: the workload and scaling to report on, the platform it is measured on,
    the platform it scales to and where the report goes (None: only printed)."""

    request: TrainReportRequest
    platform: PlatformChoice
    scale_platform: str
    output: str | None


ModelConfig = FitConfig | AccuracyConfig | PredictConfig | TrainModelConfig


def _emit(text: str, output: str | None) -> None:
    print(text, end="" if text.endswith("\n") else "\n")
    if output:
        write_text_atomic(output, text if text.endswith("\n") else text + "\n")
        print(f"# wrote {output}")


def chosen_platform(choice: PlatformChoice, default: str | None = None) -> Platform:
    """--platform (or ``default``), with --inter's inter-node link if given."""
    name = choice.platform or default
    if name is None:
        raise UsageError("--platform: expected a platform file, run directory or shipped name")
    platform = load_platform(name)
    if choice.inter:
        platform = with_inter(platform, load_platform(choice.inter))
    return platform


def _require_inter(platform: Platform, layout: JobShape) -> None:
    """Across nodes the inter-node link must be known (measured or named)."""
    if layout.nodes > 1 and not platform.inter.measured and not platform.assumed:
        raise UsageError(
            f"platform {platform.path}: its inter-node link is not measured "
            f"({platform.inter.note}); predicting {layout.nodes} nodes needs --inter NAME "
            "(a shipped interconnect such as ib-hdr200) or an assumed platform"
        )


# --- fit --------------------------------------------------------------------------------


# The isolation group the experiment engine files a calibration job under.
CALIBRATION_GROUP = "calibration"


def _calibrate(cfg: FitConfig, run_dir: Path) -> int:
    """One calibration job per process count, appended one after the other, run by the
    experiment engine (jobs.orchestrate): Ctrl-C or SIGTERM stops the running job; the
    exit code (130 when interrupted)."""
    from osu_dl_bench.jobs import launch
    from osu_dl_bench.jobs.orchestrate import Experiment, run_experiment, run_followed

    launch.check_not_in_mpi_job("model fit", "fit a RUN_DIR that holds its calibration")
    jobs = [(nprocs, 1, CALIBRATION_GROUP) for nprocs in cfg.counts]
    commands = {
        job: _calibration_command(cfg, run_dir, job[0], index > 0) for index, job in enumerate(jobs)
    }

    def run(job, progress):
        print(f"# calibrating: {' '.join(commands[job])}", flush=True)
        env = launch.mpi_environment(job[0])
        # The job writes no progress events: its whole time limit is also its stall limit.
        return run_followed(commands[job], env, job, progress, cfg.timeout, limit=cfg.timeout)

    def explain(job, outcome) -> None:
        if outcome.over_limit or outcome.stalled_at is not None:
            raise UsageError(f"the calibration job did not finish within {cfg.timeout:.0f} s")
        raise UsageError(
            f"the calibration job failed (exit {outcome.code}): {' '.join(commands[job])}"
        )

    experiment = Experiment(
        str(run_dir),
        jobs,
        dict.fromkeys(jobs, 1),
        run,
        explain,
        progress=False,
        owns_run=False,  # RUN_DIR may be a sweep's: its completion mark stays as it is
        interrupted=f"nothing was fitted; {run_dir} keeps the calibration rows written so far",
    )
    return run_experiment(experiment).code


def _calibration_command(cfg: FitConfig, run_dir: Path, nprocs: int, append: bool) -> list[str]:
    """The calibration job of ``nprocs`` ranks (``append``: to the rows of an earlier one)."""
    from osu_dl_bench.jobs.launch import mpi_command

    argv = ["-m", MODULE, str(run_dir), "-m", cfg.message_size, "--rounds", str(cfg.rounds)]
    argv += ["--append"] if cfg.append or append else []
    return mpi_command(nprocs, argv)


def _corrected(platform: Platform, run_dir: Path, how: str) -> Platform:
    """The platform with corrections fitted to RUN_DIR's sweep (model.corrections)."""
    from dataclasses import replace

    from osu_dl_bench.model.corrections import fit_to_sweep
    from osu_dl_bench.model.measured import load_rows

    results = run_dir / RESULTS
    fitted = fit_to_sweep(platform, load_rows(results), how)
    provenance = {
        **fitted.provenance,
        "corrections": {"results": str(results.resolve()), "state_scaling": how},
    }
    return replace(fitted, provenance=provenance)


def run_fit(cfg: FitConfig) -> int:
    """Calibrate if needed (the sweep's own calibration rows are used when RUN_DIR has
    them), fit, correct the formulas with RUN_DIR's sweep if it has one, write
    RUN_DIR/platform.json and print the parameters."""
    run_dir = Path(cfg.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"RUN_DIR {run_dir}: expected a directory, got a file")
    if cfg.corrections and (run_dir / RESULTS).is_file():
        collective_rows(RunStore(run_dir).read()[0], run_dir)  # before minutes of calibrating
    calibrated = has_calibration(run_dir)
    if cfg.calibrate == "never" and not calibrated:
        raise UsageError(f"{run_dir}: no {CALIBRATION_CSV} and --calibrate never")
    if cfg.calibrate == "always" or not calibrated:
        run_dir.mkdir(parents=True, exist_ok=True)
        code = _calibrate(cfg, run_dir)
        if code != 0:
            return code
    platform, _ = fit_platform(run_dir, cfg.name)
    if cfg.corrections and (run_dir / RESULTS).is_file():
        platform = _corrected(platform, run_dir, cfg.state_scaling)
    path = platform.write(run_dir / PLATFORM_FILE)
    print(platform_text(platform))
    shaped = _shaped_rate_line(platform)
    if shaped:
        print(shaped)
    print(f"# wrote {path}")
    return 0


# Set by scripts/cluster_local.sh env: the rate tbf shapes each node's link to.
SHAPED_RATE_VARIABLE = "OSU_DL_BENCH_CLUSTER_RATE"


def _shaped_rate_line(platform: Platform) -> str | None:
    """The fitted inter-node bandwidth (its largest sizes' piece) beside the rate the
    links were shaped to, where both are known."""
    import os

    from collectives.units import parse_link_rate

    shaped = os.environ.get(SHAPED_RATE_VARIABLE)
    if not shaped or not platform.inter.measured or not platform.inter.alpha_beta:
        return None
    try:
        rate = parse_link_rate(shaped)
    except ValueError as exc:
        raise UsageError(f"{SHAPED_RATE_VARIABLE}: {exc}") from None
    _, beta = platform.inter.alpha_beta[-1].values
    fitted = 1 / beta if beta else float("inf")
    return (
        f"# inter-node link: fitted {fitted / 1e6:.1f} MB/s from "
        f"{format_size(platform.inter.alpha_beta[-1].min_bytes)}, shaped to {shaped} "
        f"({rate / 1e6:.1f} MB/s): {fitted / rate:.1%} of it"
    )


def _link_lines(link) -> list[str]:
    lines = []
    for piece in link.alpha_beta:
        alpha, beta = piece.values
        bw = f"{1e-9 / beta:.2f} GB/s" if beta else "inf"
        lines.append(
            f"  from {format_size(piece.min_bytes):>5}: alpha {alpha * 1e6:7.3f} us, "
            f"beta {beta * 1e9:.4f} ns/B ({bw})"
        )
    for name, pieces in (("gamma", link.gamma), ("gamma of native", link.gamma_native)):
        for piece in pieces or ():
            value = piece.values[0] * 1e9
            lines.append(f"  from {format_size(piece.min_bytes):>5}: {name} {value:.4f} ns/B")
    return lines


def _state_lines(platform: Platform) -> list[str]:
    lines = []
    for state in platform.states:
        barrier = "-" if state.barrier_s is None else f"{state.barrier_s * 1e6:.3f} us"
        lines.append(
            f"contention state, {state.ranks} ranks per node active: software overhead "
            f"{state.software_overhead_s * 1e6:.3f} us per step, barrier {barrier}"
        )
        lines += _link_lines(state.intra)
    return lines


def platform_text(platform: Platform) -> str:
    """The parameters in readable units."""
    lines = [f"# platform {platform.name}: {platform.source}"]
    for cls in ("intra", "inter"):
        link = getattr(platform, cls)
        lines.append(f"{cls}: {'measured' if link.measured else 'NOT measured'}; {link.note}")
        lines += _link_lines(link)
    lines.append(f"software overhead per step: {platform.software_overhead_s * 1e6:.3f} us")
    lines.append(f"cores per node: {platform.cores_per_node or 'not limited'}")
    return "\n".join(lines + _state_lines(platform) + _correction_lines(platform))


def _correction_lines(platform: Platform) -> list[str]:
    if not platform.corrections:
        return ["corrections: none (the formulas as they are)"]
    source = platform.provenance.get("corrections", {}).get("results", "a sweep")
    lines = [
        f"corrections fitted to {source} (state scaling {platform.state_scaling}): "
        "factors on each formula's per-message and per-byte parts"
    ]
    for c in platform.corrections:
        lines.append(
            f"  {c.collective:<10} {c.algorithm:<28} p={c.nprocs:<3} nodes={c.nodes:<2} "
            f"from {format_size(c.min_bytes):>5}: latency x{c.latency:6.3f}, "
            f"bandwidth x{c.bandwidth:6.3f}"
        )
    return lines


# --- accuracy ---------------------------------------------------------------------------


def run_accuracy(cfg: AccuracyConfig) -> int:
    """Compare every measured point with its prediction; the last line is the average."""
    from osu_dl_bench.model import accuracy

    require_matplotlib("model accuracy")  # refused before the comparison, not at its plot
    source = Path(cfg.run_dir)
    default = source if source.is_dir() else source.parent
    if not cfg.platform.platform and not (default / PLATFORM_FILE).exists():
        raise UsageError(
            f"{default}: no {PLATFORM_FILE}: run 'osu-dl-bench model fit {default}' first "
            "or name one with --platform"
        )
    platform = chosen_platform(cfg.platform, str(default / PLATFORM_FILE))
    rows = accuracy.load_measurements(source)
    result = accuracy.compare(platform, rows)
    if result["accuracy"].isna().all():
        raise UsageError(f"{source}: none of its {len(result)} points is one the model predicts")
    ceiling = accuracy.ceiling(rows, result)
    plot = Path(cfg.plot) if cfg.plot else default / "plots" / "model_accuracy.png"
    written = accuracy.plot(result, plot)
    if cfg.csv:
        write_atomic(Path(cfg.csv), lambda tmp: result.to_csv(tmp, index=False))
    text = accuracy.report(result, platform, ceiling, _measured_note(platform, source, rows))
    head, last = text.rstrip("\n").rsplit("\n", 1)
    print(f"{head}\n# plot: {written}")
    if cfg.output:
        write_text_atomic(cfg.output, text)
        print(f"# wrote {cfg.output}")
    print(last)  # the average accuracy stays the last line
    return 0


def _measured_note(platform: Platform, source: Path, rows) -> str:
    """Where the measurements come from, their launches, and whether the platform's
    corrections were fitted to them (an in-sample score)."""
    from osu_dl_bench.model.measured import launch_count

    results = source / RESULTS if source.is_dir() else source
    note = f"{results}, {launch_count(rows)} launch(es)"
    fitted_to = platform.provenance.get("corrections", {}).get("results")
    if fitted_to and Path(fitted_to) == results.resolve():
        note += (
            "; IN-SAMPLE: the platform's corrections were fitted to this sweep (score a "
            "fresh sweep with --platform)"
        )
    return note


# --- predict ----------------------------------------------------------------------------


def run_predict(cfg: PredictConfig) -> int:
    """Print each algorithm's predicted time per size; write the predicted table."""
    from osu_dl_bench.model.predict import predicted_table, prediction_text
    from osu_dl_bench.selection.summary import table_summary

    layout, collectives = cfg.layout, list(cfg.collectives)
    platform = chosen_platform(cfg.platform)
    _require_inter(platform, layout)
    name = Path(cfg.output).stem if cfg.output else f"predicted-{layout.nprocs}"
    table, predictions = predicted_table(platform, layout, collectives, list(cfg.sizes), name)
    print(
        f"# predicted for p={layout.nprocs} ({layout.nodes} nodes x {layout.ranks_per_node} "
        f"ppn) on platform {platform.name}{' (ASSUMED values)' if platform.assumed else ''}"
    )
    print(f"# {platform.source}")
    for collective in collectives:
        print(prediction_text(collective, predictions[collective]))
    print(table_summary(table), end="")
    if cfg.output:
        print(f"# wrote {table.write(cfg.output)}")
    return 0


# --- train ------------------------------------------------------------------------------


def run_train(cfg: TrainModelConfig) -> int:
    """Predicted vs measured step time at p, then predicted scaling on a named platform."""
    from osu_dl_bench.train.oracle_report import train_report

    platform = chosen_platform(cfg.platform)
    scale = load_platform(cfg.scale_platform)
    _emit(train_report(cfg.request, platform, scale), cfg.output)
    return 0


ACTIONS = {
    FitConfig: run_fit,
    AccuracyConfig: run_accuracy,
    PredictConfig: run_predict,
    TrainModelConfig: run_train,
}


# The options of the actions that name a file the action writes.
OUTPUT_OPTIONS = (("-o", "output"), ("--csv", "csv"), ("--plot", "plot"))


def run_model(cfg: ModelConfig) -> int:
    """Run ``osu-dl-bench model ACTION``, its output paths checked first."""
    for option, name in OUTPUT_OPTIONS:
        check_writable_file(option, getattr(cfg, name, None), make_parents=True)
    if isinstance(cfg, FitConfig):
        check_writable_directory("RUN_DIR", cfg.run_dir)
    return ACTIONS[type(cfg)](cfg)
