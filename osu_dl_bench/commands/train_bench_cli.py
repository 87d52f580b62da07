"""Options of ``osu-dl-bench train-bench``, parsed into a TrainBenchConfig (the argument
lists that pass them on to its jobs and resume its run: train.bench_config). No MPI, no
torch here."""

from __future__ import annotations

import argparse

from collectives.units import split_variant_texts
from osu_dl_bench.commands.arguments import (
    add_stall_timeout_argument,
    non_negative_int,
    output_stem,
    positive_int,
    positive_seconds,
    whole_number_up_to,
)
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.sweep_config import MAX_LAUNCHES, MAX_PROCESSES
from osu_dl_bench.train.bench_config import DEFAULT_TIMEOUT_S, TrainBenchConfig
from osu_dl_bench.train.config import MODELS

# The subcommand's line in 'osu-dl-bench --help'.
HELP = (
    "training throughput: our trainer (fixed, native, tuned) vs PyTorch DDP over Gloo "
    "(and NCCL on GPUs)"
)

# Launches per isolation group, as the sweep's --launches: the launch-to-launch variance
# is the largest part on this machine (every sweep's launch pool shows it), and three
# launches give its interval.
DEFAULT_LAUNCHES = 3


def add_benchmark_workload_arguments(
    parser: argparse.ArgumentParser, batch_help: str, threads_help: str, model_help: str = ""
) -> None:
    """The synthetic-image workload of ``train-bench``, which ``model train``
    predicts: declared once, so both describe the same model by default."""
    parser.add_argument("--model", default="resnet", choices=MODELS, help=model_help or None)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--num-classes", type=int, default=100)
    parser.add_argument("-b", "--batch-size", type=int, default=32, help=batch_help)
    parser.add_argument("--threads", type=int, default=None, help=threads_help)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option of train-bench (the hidden --worker marks the launched job)."""
    parser.add_argument(
        "--np",
        type=whole_number_up_to(MAX_PROCESSES),
        default=2,
        help="ranks of the job (default 2)",
    )
    parser.add_argument(
        "--launches",
        type=whole_number_up_to(MAX_LAUNCHES),
        default=DEFAULT_LAUNCHES,
        help=f"MPI launches per isolation group (default {DEFAULT_LAUNCHES})",
    )
    parser.add_argument(
        "--rounds", type=whole_number_up_to(MAX_LAUNCHES), default=5, help="rounds per launch"
    )
    parser.add_argument("--steps", type=positive_int, default=8, help="timed steps per measurement")
    parser.add_argument(
        "--warmup", type=non_negative_int, default=2, help="untimed steps before each"
    )
    parser.add_argument("--table", default=None, help="tuning table for the 'tuned' row")
    parser.add_argument(
        "--adapted-table",
        default=None,
        metavar="T",
        help="a table `osu-dl-bench train --adapt --write-table T` wrote (the choices kept "
        "in training), measured as 'tuned/adapted' beside 'tuned'",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where models and gradients live (cuda: one GPU per rank, and DDP over NCCL "
        "beside DDP over Gloo)",
    )
    parser.add_argument(
        "--only",
        type=configuration_labels,
        default=None,
        metavar="LABELS",
        help="measure only these configurations (comma-separated labels as the report "
        "names them, e.g. nccl,ddp-nccl; native always, every group's reference)",
    )
    add_benchmark_workload_arguments(parser, "global batch", "torch threads per rank")
    parser.add_argument(
        "--out",
        type=output_stem,
        default="results/train_p2",
        help="writes OUT.txt and OUT.json, and the run directory OUT (every launch, resumable)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        help=f"stop a launch if it runs longer (default {DEFAULT_TIMEOUT_S:g} s)",
    )
    add_stall_timeout_argument(parser)
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        help="seed of the groups' order within each launch (default: random, recorded)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run directory OUT: run only the launches it does not hold",
    )
    # Inside a launch: which one, of which group, and where rank 0 writes its record.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--launch", type=positive_int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--group", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--part", default=None, help=argparse.SUPPRESS)


def config_from_args(args: argparse.Namespace) -> TrainBenchConfig:
    """The TrainBenchConfig of parsed arguments; a global batch that cannot give each rank
    a sample is refused here, before a run directory exists."""
    if args.batch_size < args.np:
        raise UsageError(
            f"-b {args.batch_size}: a global batch smaller than the {args.np} ranks "
            f"(--np) leaves a rank without a sample: -b {args.np} or more"
        )
    check_only(args.only)
    return TrainBenchConfig(
        np=args.np,
        launches=args.launches,
        rounds=args.rounds,
        steps=args.steps,
        warmup=args.warmup,
        table=args.table,
        model=args.model,
        depth=args.depth,
        width=args.width,
        image_size=args.image_size,
        num_classes=args.num_classes,
        batch_size=args.batch_size,
        threads=args.threads,
        out=args.out,
        timeout=args.timeout,
        stall_timeout=args.stall_timeout,
        seed=args.seed,
        device=args.device,
        only=args.only,
        adapted_table=args.adapted_table,
        resume=args.resume,
        worker=args.worker,
        launch=args.launch,
        group=args.group,
        part=args.part,
    )


def configuration_labels(text: str) -> str:
    """--only: labels separated by commas (a label's own parameters keep theirs, as -a's
    do: split_variant_texts), each printable and not an option; sorted, once each."""
    labels = split_variant_texts(text)
    bad = [label for label in labels if not label.isprintable() or label.startswith("-")]
    if not labels or bad or any(not part.strip() for part in text.split(",")):
        raise argparse.ArgumentTypeError(
            f"expected configuration labels separated by commas, got {text!r}"
        )
    return ",".join(sorted(set(labels)))


def check_only(only: str | None) -> None:
    """Refuse, before any job or run directory, labels no configuration can carry."""
    if only is None:
        return
    from osu_dl_bench.train.comparison import possible_labels

    known = possible_labels()
    unknown = [label for label in split_variant_texts(only) if label not in known]
    # The report names native in another group 'native@GROUP': the same configuration.
    unknown = [label for label in unknown if label.partition("@")[0] != "native"]
    if unknown:
        raise UsageError(
            f"--only: no configuration is named {', '.join(unknown)}; the labels are "
            f"{', '.join(sorted(known))}"
        )


def start(cfg: TrainBenchConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.commands.train_bench import run_train_bench
    from osu_dl_bench.jobs.launch import check_not_in_mpi_job

    if not cfg.worker:
        check_not_in_mpi_job("train-bench")
    return run_train_bench(cfg)  # MPI only inside its jobs (--worker)
