"""Options of the ``model`` subcommand and its actions (fit, accuracy, predict, train), each
parsed into its own config, and of the calibration job ``model fit`` launches. Declared apart
from the code that runs them: that code loads the registry and mpi4py."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from collectives.shape import JobShape
from collectives.units import doubling_sizes
from osu_dl_bench.commands.arguments import positive_int, positive_seconds
from osu_dl_bench.commands.train_bench_cli import add_benchmark_workload_arguments
from osu_dl_bench.errors import UsageError

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "performance model: fit, accuracy vs a sweep, predict at scale, train"

if TYPE_CHECKING:  # the work module loads pandas and the model, which parsing must not wait for
    from osu_dl_bench.commands.model import (
        AccuracyConfig,
        FitConfig,
        ModelConfig,
        PlatformChoice,
        PredictConfig,
        TrainModelConfig,
    )

# model.state's scalings, repeated here: the options load without numpy and pandas.
SCALINGS = ("none", "copy", "allreduce", "blend")
DEFAULT_SCALING = "blend"

DEFAULT_SCALE_PLATFORM = "ib-hdr200"
DEFAULT_SCALE_NP = "64,128,256,512,1024"


@dataclass(frozen=True)
class CalibrationJobConfig:
    """The calibration job: its run directory, sizes MIN:MAX, rounds and whether it adds to
    the directory's earlier calibration."""

    run_dir: str
    message_size: str
    rounds: int
    append: bool


def _fit(sub) -> None:
    parser = sub.add_parser("fit", help="fit alpha, beta, gamma to a run directory's measurements")
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="run directory (platform.json goes here)"
    )
    parser.add_argument(
        "--calibrate",
        choices=("auto", "always", "never"),
        default="auto",
        help="run the calibration jobs: auto = when RUN_DIR has no calibration.csv (a sweep "
        "writes one, calibrated in its launches)",
    )
    parser.add_argument(
        "--np",
        default="2",
        help="process counts of the calibration jobs, one job each, all on this node "
        "(default 2; give the sweep's, e.g. 2,3,4: each is a contention state of the node)",
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="add the calibration job to RUN_DIR's earlier ones (the fit takes medians)",
    )
    parser.add_argument(
        "-m",
        "--message-size",
        default="8:64M",
        help="calibration sizes MIN:MAX (default 8:64M: past a sweep's 16M, so that its "
        "largest regime is fitted on points on either side)",
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=10, help="calibration rounds (default 10)"
    )
    parser.add_argument(
        "--timeout", type=positive_seconds, default=600, help="calibration job limit, s"
    )
    parser.add_argument("--name", default=None, help="platform name (default: run dir name)")
    parser.add_argument(
        "--no-corrections",
        action="store_true",
        help="keep the formulas as they are (default: when RUN_DIR holds a sweep, fit two "
        "factors per variant, p and size band to it: model.corrections)",
    )
    parser.add_argument(
        "--state-scaling",
        choices=SCALINGS,
        default=DEFAULT_SCALING,
        help="scale each sweep point's prediction by its machine-state reference over the "
        f"calibration's: {', '.join(SCALINGS)} (default {DEFAULT_SCALING})",
    )


def _platform_args(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument(
        "--platform",
        required=required,
        default=None,
        metavar="F",
        help="platform file, run directory with platform.json, or shipped name (ib-edr100, ...)",
    )
    parser.add_argument(
        "--inter",
        default=None,
        metavar="NAME|FILE",
        help="take the inter-node link from this platform (a one-host fit has none measured)",
    )


def _accuracy(sub) -> None:
    parser = sub.add_parser("accuracy", help="prediction vs measurement for every point of a sweep")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="sweep run directory (or results CSV)")
    _platform_args(parser, required=False)
    parser.add_argument("-o", "--output", default=None, help="also write the report here")
    parser.add_argument(
        "--plot", default=None, help="scatter PNG (default RUN_DIR/plots/model_accuracy.png)"
    )
    parser.add_argument("--csv", default=None, help="write every point's prediction to this CSV")


def _predict(sub) -> None:
    parser = sub.add_parser("predict", help="predicted times and tuning table at any scale")
    parser.add_argument("--np", type=int, required=True, help="process count")
    parser.add_argument("--ppn", type=int, default=None, help="ranks per node (default: np)")
    _platform_args(parser, required=True)
    parser.add_argument("--collectives", default="allreduce,bcast", help="comma list")
    parser.add_argument("-m", "--message-size", default="8:256M", help="sizes MIN:MAX, doubling")
    parser.add_argument("-o", "--output", default=None, help="write the predicted table (.json)")


def _train(sub) -> None:
    parser = sub.add_parser("train", help="predicted training step time, measured vs scaled")
    _platform_args(parser, required=True)
    parser.add_argument(
        "--measured", default=None, help="train-bench JSON to compare with (its model and p)"
    )
    parser.add_argument("--scale-platform", default=DEFAULT_SCALE_PLATFORM, metavar="NAME|FILE")
    parser.add_argument("--scale-np", default=DEFAULT_SCALE_NP, help="process counts to predict")
    parser.add_argument("--scale-ppn", type=positive_int, default=8, help="ranks per node at scale")
    parser.add_argument(
        "--np", type=positive_int, default=2, help="p of the comparison (without JSON)"
    )
    add_benchmark_workload_arguments(
        parser, "global batch at p", "torch threads (cores / p)", "the model (without JSON)"
    )
    parser.add_argument("-o", "--output", default=None, help="also write the report here")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the model actions."""
    sub = parser.add_subparsers(dest="model_command", required=True, parser_class=type(parser))
    for add in (_fit, _accuracy, _predict, _train):
        add(sub)


def calibration_job_parser() -> argparse.ArgumentParser:
    """The options of the calibration job that ``model fit`` launches (commands.calibration_job)."""
    parser = argparse.ArgumentParser(prog="osu_dl_bench.commands.calibration_job")
    parser.add_argument("run_dir")
    parser.add_argument("-m", "--message-size", default="8:64M")
    parser.add_argument("--rounds", type=positive_int, default=10)
    parser.add_argument("--append", action="store_true", help="add to RUN_DIR's calibration")
    return parser


def calibration_job_config_from_args(args: argparse.Namespace) -> CalibrationJobConfig:
    """The CalibrationJobConfig of calibration_job_parser's arguments."""
    return CalibrationJobConfig(args.run_dir, args.message_size, args.rounds, args.append)


def calibration_counts(text: str) -> tuple[int, ...]:
    """--np's process counts (the sweep's syntax), each >= 2: a calibration needs peers."""
    # Imported here: jobs.sweep_config loads pandas, which parsing the options must not wait for.
    from osu_dl_bench.jobs.sweep_config import parse_process_counts

    counts = parse_process_counts(text)
    if min(counts) < 2:
        raise UsageError(f"--np {text!r}: expected process counts >= 2, such as 2,3,4")
    return counts


def _fit_config(args: argparse.Namespace) -> FitConfig:
    # Imported here: it loads numpy, which parsing the options must not wait for.
    from osu_dl_bench.commands.model import FitConfig
    from osu_dl_bench.measurement.bench_config import parse_size_range

    parse_size_range(args.message_size, 8)  # checked here, not inside the launched job
    return FitConfig(
        run_dir=args.run_dir,
        calibrate=args.calibrate,
        counts=calibration_counts(args.np),
        message_size=args.message_size,
        rounds=args.rounds,
        timeout=args.timeout,
        append=args.append,
        name=args.name,
        corrections=not args.no_corrections,
        state_scaling=args.state_scaling,
    )


def _platform_choice(args: argparse.Namespace) -> PlatformChoice:
    from osu_dl_bench.commands.model import PlatformChoice

    return PlatformChoice(args.platform, args.inter)


def _accuracy_config(args: argparse.Namespace) -> AccuracyConfig:
    from osu_dl_bench.commands.model import AccuracyConfig

    return AccuracyConfig(args.run_dir, _platform_choice(args), args.output, args.plot, args.csv)


def _layout(nprocs: int, ppn: int | None) -> JobShape:
    """--np ranks, --ppn per node (default and at most np), on as many nodes as that takes."""
    if nprocs < 1:
        raise UsageError(f"--np: expected a process count >= 1, got {nprocs}")
    if ppn is not None and ppn < 1:
        raise UsageError(f"--ppn: expected ranks per node >= 1, got {ppn}")
    return JobShape.packed(nprocs, ppn or nprocs)


def _predict_config(args: argparse.Namespace) -> PredictConfig:
    # Imported here: both load numpy, and jobs.sweep_config pandas, which parsing the options
    # must not wait for.
    from osu_dl_bench.commands.model import PredictConfig
    from osu_dl_bench.jobs.sweep_config import parse_collectives
    from osu_dl_bench.measurement.bench_config import parse_size_range

    layout = _layout(args.np, args.ppn)
    collectives = parse_collectives(args.collectives)
    sizes = tuple(doubling_sizes(*parse_size_range(args.message_size, 8)))
    if args.output and not args.output.endswith(".json"):
        raise UsageError(f"-o {args.output}: expected a file ending in .json")
    return PredictConfig(layout, _platform_choice(args), collectives, sizes, args.output)


def _train_config(args: argparse.Namespace) -> TrainModelConfig:
    # Imported here: train.oracle_report loads pandas, which parsing the options must not
    # wait for.
    from osu_dl_bench.commands.model import TrainModelConfig
    from osu_dl_bench.jobs.sweep_config import parse_process_counts
    from osu_dl_bench.train.oracle_report import TrainReportRequest

    parse_process_counts(args.scale_np, "--scale-np")
    request = TrainReportRequest(
        model=args.model,
        batch_size=args.batch_size,
        depth=args.depth,
        width=args.width,
        image_size=args.image_size,
        num_classes=args.num_classes,
        np=args.np,
        threads=args.threads,
        measured=args.measured,
        scale_np=args.scale_np,
        scale_ppn=args.scale_ppn,
    )
    return TrainModelConfig(request, _platform_choice(args), args.scale_platform, args.output)


_CONFIGS = {
    "fit": _fit_config,
    "accuracy": _accuracy_config,
    "predict": _predict_config,
    "train": _train_config,
}


def config_from_args(args: argparse.Namespace) -> ModelConfig:
    """The config of the model action the arguments name, its pure checks done."""
    return _CONFIGS[args.model_command](args)


def start(cfg: ModelConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.runtime.start import init_mpi

    init_mpi()  # the registry, whose cost formulas the model evaluates, loads mpi4py
    from osu_dl_bench.commands.model import run_model

    return run_model(cfg)
