"""Options of the ``model`` subcommand and its actions (fit, accuracy, predict, train).
Declared apart from the code that runs them: that code loads the registry and mpi4py."""

from __future__ import annotations

import argparse

from osu_dl_bench.commands.train_bench_options import add_benchmark_workload_arguments

# model.state's scalings, repeated here: the options load without numpy and pandas.
SCALINGS = ("none", "copy", "allreduce", "blend")
DEFAULT_SCALING = "blend"

DEFAULT_SCALE_PLATFORM = "ib-hdr200"
DEFAULT_SCALE_NP = "64,128,256,512,1024"


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
    parser.add_argument("--rounds", type=int, default=10, help="calibration rounds (default 10)")
    parser.add_argument("--timeout", type=float, default=600, help="calibration job limit, s")
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
    parser.add_argument("--scale-ppn", type=int, default=8, help="ranks per node at scale")
    parser.add_argument("--np", type=int, default=2, help="p of the comparison (without JSON)")
    add_benchmark_workload_arguments(
        parser, "global batch at p", "torch threads (cores / p)", "the model (without JSON)"
    )
    parser.add_argument("-o", "--output", default=None, help="also write the report here")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the model actions."""
    sub = parser.add_subparsers(dest="model_command", required=True, parser_class=type(parser))
    for add in (_fit, _accuracy, _predict, _train):
        add(sub)


def calibration_job_parser() -> argparse.ArgumentParser:
    """The options of the calibration job that ``model fit`` launches (commands.calibration_job)."""
    parser = argparse.ArgumentParser(prog="osu_dl_bench.commands.calibration_job")
    parser.add_argument("run_dir")
    parser.add_argument("-m", "--message-size", default="8:64M")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--append", action="store_true", help="add to RUN_DIR's calibration")
    return parser
