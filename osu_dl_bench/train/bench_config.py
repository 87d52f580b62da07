"""``train-bench``'s config (TrainBenchConfig), the options its run directory records (and
the argument lists that pass them on to a launch and resume the run) and the training
workload it measures; commands.train_bench_cli parses the command line into it. No
torch, no MPI, no registry: the parser loads this module."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from osu_dl_bench.jobs.sweep_config import DEFAULT_STALL_TIMEOUT
from osu_dl_bench.train.config import TrainConfig

# A whole comparison at p = 2 on the reference machine took about two minutes in one
# launch; an hour per launch leaves room for larger models and busier hosts and still ends
# a hung job.
DEFAULT_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class TrainBenchConfig:
    """train-bench's options: the job's ranks, launches per isolation group, rounds per
    launch, timed and warm-up steps, the tuning table, the workload, where the results go,
    the launch's time limits (in all, and without output), the order's seed and whether
    to continue OUT; inside a launch
    (``worker``), which launch of which group it is and where rank 0 leaves its record."""

    np: int
    launches: int
    rounds: int
    steps: int
    warmup: int
    table: str | None
    model: str
    depth: int
    width: int
    image_size: int
    num_classes: int
    batch_size: int
    threads: int | None
    out: str
    timeout: float
    seed: int | None
    device: str = "cpu"  # where the models and gradient buckets live: cpu or cuda
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    # The configurations measured (their labels, comma-separated; native always, as every
    # group's reference); None: every one.
    only: str | None = None
    # A table of the choices `train --adapt` kept in training (`--write-table`), measured
    # as 'tuned/adapted' beside tuned; None: not measured.
    adapted_table: str | None = None
    resume: bool = False
    worker: bool = False
    launch: int = 1
    # None: the launch measures every configuration (a worker run by hand).
    group: str | None = None
    # None: the launch writes the report of itself alone (a worker run by hand).
    part: str | None = None


# The options a launch is given and the run directory records (a resume must repeat them),
# in the order the launched job gets them.
RECORDED_OPTIONS = (
    "np",
    "launches",
    "rounds",
    "steps",
    "warmup",
    "table",
    "model",
    "depth",
    "width",
    "image_size",
    "num_classes",
    "batch_size",
    "threads",
    "out",
    "device",
    "only",
    "adapted_table",
)


def recorded_options(cfg: TrainBenchConfig) -> dict[str, Any]:
    """The options as the run directory and the JSON output record them (the device only
    off the CPU, so run directories made before it existed still resume)."""
    options = {name: getattr(cfg, name) for name in RECORDED_OPTIONS}
    if options["device"] == "cpu":
        del options["device"]
    for name in ("only", "adapted_table"):
        if options[name] is None:  # as before the option existed
            del options[name]
    return options


def workload(cfg: TrainBenchConfig) -> TrainConfig:
    """The trainer's config of every configuration: the synthetic-image model of ``cfg``,
    on GPUs with its buckets there and its start-up bcast native (staged where MPI is not
    CUDA-aware), so that only the configurations of the nccl group bind NCCL."""
    on_gpu = {"buffers": "cuda", "bcast": "native"} if cfg.device == "cuda" else {}
    return TrainConfig(
        model=cfg.model,
        data="synthetic",
        batch_size=cfg.batch_size,
        depth=cfg.depth,
        width=cfg.width,
        image_size=cfg.image_size,
        num_classes=cfg.num_classes,
        synthetic_batches=4,
        threads=cfg.threads,
        lr=0.01,
        **on_gpu,
    )


def _option_flag(name: str) -> str:
    """The flag of a recorded option ('image_size' -> '--image-size')."""
    return "--" + name.replace("_", "-")


def _recorded_argv(cfg: TrainBenchConfig) -> list[str]:
    """The recorded options (train.bench_config.RECORDED_OPTIONS) as flags and values, in
    their order; an option without a value is left out."""
    argv = []
    recorded = recorded_options(cfg)
    for name in RECORDED_OPTIONS:
        value = recorded.get(name)
        if value is not None:
            argv += [_option_flag(name), str(value)]
    return argv


def worker_argv(
    cfg: TrainBenchConfig, launch: int = 1, group: str | None = None, part: str | None = None
) -> list[str]:
    """The arguments of ``python -m osu_dl_bench`` for one launch: the same options,
    --worker, the launch's number and group, and where rank 0 writes its record."""
    argv = ["train-bench", "--worker", "--launch", str(launch)]
    argv += ["--group", group] if group else []
    argv += ["--part", part] if part else []
    return argv + _recorded_argv(cfg)


def resume_command(cfg: TrainBenchConfig) -> str:
    """The shell command that continues ``cfg``'s run directory: the options it records
    (a resume must repeat them), the time limit where it is not the default, --resume."""
    argv = ["osu-dl-bench", "train-bench", *_recorded_argv(cfg)]
    if cfg.timeout != DEFAULT_TIMEOUT_S:
        argv += ["--timeout", str(cfg.timeout)]
    return shlex.join([*argv, "--resume"])
