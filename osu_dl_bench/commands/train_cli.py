"""The train subcommand's options, parsed once into a TrainConfig."""

from __future__ import annotations

import argparse

from collectives.units import parse_size
from osu_dl_bench.train.config import (
    DATASETS,
    DEFAULT_DATA,
    FLOAT64_TOLERANCE,
    FP16_RELATIVE_TOLERANCE,
    MODELS,
    PROGRESS,
    TrainConfig,
    buffer_kind,
    check_train_config,
)

# The subcommand's line in 'osu-dl-bench --help'.
HELP = "data-parallel CNN training through the collectives"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the train options."""
    model = parser.add_argument_group("model and data")
    model.add_argument("--model", choices=MODELS, default="cnn", help="default cnn")
    model.add_argument("--data", choices=DATASETS, default=None, help="default: by model")
    model.add_argument(
        "--depth", type=int, default=18, help="resnet depth 10, 18, 26, ... 202 (18)"
    )
    model.add_argument("--width", type=int, default=64, help="resnet base channels, 1..1024 (64)")
    model.add_argument(
        "--image-size", type=int, default=224, metavar="N", help="synthetic, 8..1024 (224)"
    )
    model.add_argument(
        "--num-classes", type=int, default=1000, metavar="N", help="synthetic, 1..100000 (1000)"
    )
    model.add_argument(
        "--synthetic-batches",
        type=int,
        default=10,
        metavar="N",
        help="steps per epoch, 1..100000 (10)",
    )
    opt = parser.add_argument_group("optimisation")
    opt.add_argument("-b", "--batch-size", type=int, default=64, help="global batch, 1..65536 (64)")
    opt.add_argument("--epochs", type=int, default=6, help="1..10000 (6)")
    opt.add_argument(
        "--steps", type=int, default=None, help="total steps, 1..1e7 (overrides epochs)"
    )
    opt.add_argument("--lr", type=float, default=0.1, help="SGD learning rate, in (0, 1000] (0.1)")
    opt.add_argument("--momentum", type=float, default=0.9, help="in [0, 1) (0.9)")
    opt.add_argument("--weight-decay", type=float, default=0.0, help="in [0, 1] (0)")
    opt.add_argument("--seed", type=int, default=0, help="data order, split, init; 0..2**32-1 (0)")
    opt.add_argument("--threads", type=int, default=None, help="torch threads (cores / ppn)")
    comm = parser.add_argument_group("communication")
    comm.add_argument("--allreduce", default=None, metavar="ALG", help="fixed, e.g. ring:seg=1M")
    comm.add_argument("--bcast", default=None, metavar="ALG", help="fixed, e.g. chain:seg=256K")
    comm.add_argument("--table", default=None, help="tuning table (selector; default native)")
    comm.add_argument("--bucket-cap", default="25M", metavar="SIZE", help="bucket cap (25M)")
    comm.add_argument("--first-bucket", default="1M", metavar="SIZE", help="first bucket (1M)")
    comm.add_argument("--no-overlap", action="store_true", help="reduce after backward")
    comm.add_argument("--fp16-compress", action="store_true", help="reduce gradients in fp16")
    comm.add_argument(
        "--buffers",
        choices=("cpu", "cpu-registered"),
        default="cpu",
        help="gradient buckets in private memory (cpu) or in registered memory the node's "
        "ranks read directly (cpu-registered: the cma allreduce then copies nothing twice)",
    )
    comm.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the model, its batches and gradient buckets live: cuda puts them on "
        "this rank's GPU (one per node-local rank) and reduces the buckets through the "
        "selector on cupy views (NCCL, or MPI: CUDA-aware or staged through host memory)",
    )
    check = parser.add_argument_group("the table checked in training")
    check.add_argument(
        "--check-table",
        action="store_true",
        help="after warm-up, rotate each bucket's allreduce among the table's choice, "
        "native, the null control and up to two contenders for 10 rounds (about 50 "
        "steps), timing each call in training; report per bucket size whether the "
        "choice holds by the decision rule, with intervals (needs --table)",
    )
    check.add_argument(
        "--adapt",
        action="store_true",
        help="run the check, then keep per bucket size the best in training by the rule "
        "(the table's choice where it holds)",
    )
    check.add_argument(
        "--write-table",
        default=None,
        metavar="OUT",
        help="run the check and write the table with the choices kept in training (its "
        "other entries as --table has them), for select, train --table and compare",
    )
    run = parser.add_argument_group("validation, checkpoints and output")
    run.add_argument(
        "--validate",
        action="store_true",
        help="train in float64 beside a 1-process float64 reference on rank 0 and compare "
        "every rank's parameters with it (exit 1 beyond --tolerance); the whole run, "
        "throughput included, is then in float64",
    )
    run.add_argument(
        "--validate-steps",
        type=int,
        default=20,
        metavar="N",
        help="compare after the first N steps of the run (default 20; float64 rounding stays "
        "far below --tolerance over the whole default run, the fp16 bound is stated for 20)",
    )
    run.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help=f"max |p-rank - 1-process parameter| over every rank (default "
        f"{FLOAT64_TOLERANCE:g}: float64 rounding stays below 3e-13, while a gradient "
        f"element wrong by 1e-8 shows; with --fp16-compress {FP16_RELATIVE_TOLERANCE:g} x "
        f"the largest |parameter|, as float16 rounds gradients to 2^-11 relative: stated "
        f"for the default --validate-steps 20, after which the gap grows chaotically)",
    )
    run.add_argument("--checkpoint-dir", default=None, metavar="DIR")
    run.add_argument("--checkpoint-every", type=int, default=0, metavar="K", help="steps (off)")
    run.add_argument("--keep-checkpoints", type=int, default=2, metavar="N", help="(2)")
    run.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    run.add_argument("--json", default=None, metavar="FILE", help="write the summary")
    run.add_argument("--save-params", default=None, metavar="FILE", help="final state_dict")
    run.add_argument("--progress", choices=PROGRESS, default="auto", help="rank 0's bar")
    run.add_argument("--warmup-steps", type=int, default=2, metavar="N", help="untimed (2)")
    run.add_argument(
        "--batches-per-iter", type=int, default=5, metavar="N", help="steps per timing (5)"
    )


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Build and check the TrainConfig."""
    cfg = TrainConfig(
        model=args.model,
        data=args.data or DEFAULT_DATA[args.model],
        batch_size=args.batch_size,
        epochs=args.epochs,
        steps=args.steps,
        lr=args.lr,
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        seed=args.seed,
        depth=args.depth,
        width=args.width,
        image_size=args.image_size,
        num_classes=args.num_classes,
        synthetic_batches=args.synthetic_batches,
        allreduce=args.allreduce,
        bcast=args.bcast,
        table=args.table,
        bucket_cap=parse_size(args.bucket_cap),
        first_bucket=parse_size(args.first_bucket),
        overlap=not args.no_overlap,
        fp16_compress=args.fp16_compress,
        buffers=buffer_kind(args.device, args.buffers),
        threads=args.threads,
        validate=args.validate,
        validate_steps=args.validate_steps,
        tolerance=args.tolerance,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints,
        resume=args.resume,
        json=args.json,
        save_params=args.save_params,
        progress=args.progress,
        warmup_steps=args.warmup_steps,
        batches_per_iter=args.batches_per_iter,
        check_table=args.check_table,
        adapt=args.adapt,
        write_table=args.write_table,
    )
    check_train_config(cfg)
    return cfg


def start(cfg: TrainConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.runtime.rank_agreement import agree_on_errors, agree_on_settings
    from osu_dl_bench.train.config import (
        init_training_mpi,
        require_libraries,
        settings_every_rank_shares,
    )

    require_libraries(cfg)  # before MPI: a missing extra is one message and exit 2
    mpi, note = init_training_mpi()
    world = mpi.COMM_WORLD
    agree_on_settings(world, agree_on_errors(world, lambda: settings_every_rank_shares(cfg)))
    cfg.local_batch(world.Get_size())  # same verdict on every rank, before torch loads
    from osu_dl_bench.train.run import run_train

    return run_train(world, cfg, [note] if note else [])
