"""The train subcommand's config (TrainConfig) and the checks of its values;
commands.train_cli parses the command line into it.

Declared apart from the trainer because the trainer loads torch (seconds) and the
registry (mpi4py.MPI, which must wait until the options are parsed: osu_dl_bench.runtime.start).
Checks that need no MPI are made here, so every rank reaches the same verdict before any
collective runs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from osu_dl_bench.errors import UsageError
from osu_dl_bench.paths import check_writable_file, probe_directory
from osu_dl_bench.runtime.rank_agreement import file_fingerprint
from osu_dl_bench.runtime.start import init_mpi, raise_environment_thread_level
from osu_dl_bench.train.ddp_defaults import DEFAULT_BUCKET_CAP, DEFAULT_FIRST_BUCKET

# Model names (osu_dl_bench.train.models builds them; a test checks the two agree).
MODELS = ("cnn", "resnet")
DATASETS = ("digits", "synthetic")
DEFAULT_DATA = {"cnn": "digits", "resnet": "synthetic"}
# The trainer's communication thread issues every MPI call, so SERIALIZED is enough, and
# MULTIPLE would slow MPICH down (runtime.start.DEFAULT_THREAD_LEVEL explains why).
THREAD_LEVEL = "serialized"
# Checkpoints are loaded with torch.load(weights_only=True); releases before 2.10 had
# known ways for a crafted file around it. pyproject.toml's extras state the same floor.
TORCH_FLOOR = (2, 10)
TORCH_EXTRA = "pip install 'osu-dl-bench[train]' (on CPU-only machines: pip install torch==2.13.0)"
SKLEARN_EXTRA = "pip install 'osu-dl-bench[train]' (or: pip install scikit-learn)"
PROGRESS = ("auto", "on", "off")
# --validate trains both the p-rank job and its 1-process reference in float64, so the
# two differ only by the order of float64 sums. In float32 that difference reached 2e-4
# after 20 steps at lr 0.1 (float32 rounding, 6e-8, grown ~3000x by the kernels and the
# training dynamics) and depended on the CPU; float64's rounding (1.1e-16) grown alike
# stays below ~3e-13 on any CPU (measured here, p = 2..6, every algorithm: <= 1.2e-16
# after 20 steps; 5e-15 after 132).
# 1e-9 leaves a margin of 3000x over that, yet a gradient element wrong by 1e-8 moves its
# parameter by lr x 1e-8 = 1e-9 in one step and fails.
FLOAT64_TOLERANCE = 1e-9
# With --fp16-compress the reference is not compressed, so the gap is the compression
# error itself: every averaged gradient element is rounded to float16 (2^-11 ~ 4.9e-4
# relative) a few times (cast, division, each summation stage), so each step's update is
# off by ~1e-3 of itself and the parameters by ~1e-3 of how far they moved, which is of
# the order of their magnitude. Measured after the default 20 steps at p = 2..6: max diff
# / max |parameter| <= 4.1e-3. The bound, 2^-5 ~ 3.1e-2 of the largest |parameter|,
# leaves 7x; a wrong reduction moves parameters by the gradient's own size and exceeds
# it. It holds for ~20 steps only: the compression error seeds a divergence that grows
# as the loss falls (measured ratio 0.13 after 40 steps): compare early.
FP16_RELATIVE_TOLERANCE = 2.0**-5


def batch_share(global_batch: int, nprocs: int, rank: int) -> tuple[int, int]:
    """Rank ``rank``'s slice [lo, hi) of a global batch split over ``nprocs`` ranks: the
    first ``global_batch % nprocs`` ranks take one sample more, as Horovod's and
    torch.utils.data's even splits do. The gradient averaging weights each rank by its
    share (comm_hooks.share_divisor), so a step still equals the 1-process step."""
    if global_batch < nprocs:
        raise UsageError(
            f"batch size {global_batch} is smaller than the {nprocs} ranks: expected at "
            f"least one sample per rank (-b {nprocs} or more)"
        )
    base, extra = divmod(global_batch, nprocs)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def init_training_mpi():
    """Start MPI at the trainer's THREAD_LEVEL even where MPI4PY_RC_THREAD_LEVEL asks for
    less; returns (mpi4py.MPI, a note for rank 0 to print or None)."""
    asked = raise_environment_thread_level(THREAD_LEVEL)
    mpi = init_mpi(THREAD_LEVEL)
    note = None
    if asked:
        note = (
            f"# MPI4PY_RC_THREAD_LEVEL={asked} is below what the trainer needs: MPI asked "
            f"for {THREAD_LEVEL} (the communication thread calls MPI)"
        )
    return mpi, note


@dataclass(frozen=True)
class TrainConfig:
    """Every option of one training run."""

    model: str = "cnn"
    data: str = "digits"
    batch_size: int = 64  # global: split over the ranks as evenly as it goes (batch_share)
    epochs: int = 6
    steps: int | None = None  # total steps; overrides epochs
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 0.0
    seed: int = 0
    depth: int = 18
    width: int = 64
    image_size: int = 224
    num_classes: int = 1000
    synthetic_batches: int = 10
    allreduce: str | None = None  # a fixed variant ('ring:seg=1M'); else table/native
    bcast: str | None = None
    table: str | None = None
    bucket_cap: int = DEFAULT_BUCKET_CAP
    first_bucket: int = DEFAULT_FIRST_BUCKET
    overlap: bool = True
    fp16_compress: bool = False
    buffers: str = "cpu"  # gradient buckets: cpu (torch's), cpu-registered, or cuda
    threads: int | None = None  # torch intra-op threads; None: cores / local ranks
    validate: bool = False
    validate_steps: int = 20
    tolerance: float | None = None  # None: FLOAT64_TOLERANCE, or the fp16 rule
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    json: str | None = None
    save_params: str | None = None
    progress: str = "auto"
    warmup_steps: int = 2
    batches_per_iter: int = 5
    check_table: bool = False  # re-time the table's choices in training after warm-up
    adapt: bool = False  # check, then keep per bucket size the best in training by the rule
    write_table: str | None = None  # check, then rank 0 writes the kept choices as a table

    def local_batch(self, nprocs: int, rank: int = 0) -> int:
        """Rank ``rank``'s share of the global batch (batch_share; rank 0 has the largest);
        UsageError where some rank would get no sample."""
        lo, hi = batch_share(self.batch_size, nprocs, rank)
        return hi - lo

    @property
    def checks_table(self) -> bool:
        """Whether the run checks its table in training (--adapt and --write-table do)."""
        return self.check_table or self.adapt or bool(self.write_table)

    @property
    def compute_dtype(self) -> str:
        """Parameters, gradients and buckets: float64 under --validate, else float32."""
        return "float64" if self.validate else "float32"


# Bounds a deep-learning user would not reach, yet small enough that a typo fails here
# with one message instead of as an overflow or an allocation failure mid-run.
# (option, low, high); int options only.
INT_BOUNDS = {
    "batch_size": (1, 1 << 16),
    "epochs": (1, 10_000),
    "steps": (1, 10_000_000),
    "depth": (10, 202),
    "width": (1, 1024),
    "image_size": (8, 1024),
    "num_classes": (1, 100_000),
    "synthetic_batches": (1, 100_000),
    "threads": (1, 4096),
    "batches_per_iter": (1, 100_000),
    "keep_checkpoints": (1, 1000),
    "validate_steps": (1, 10_000_000),
    "warmup_steps": (0, 10_000_000),
    "checkpoint_every": (0, 10_000_000),
}
# numpy's and torch's seeds: numpy.random.seed takes 0 .. 2**32 - 1.
SEED_MAX = 2**32 - 1
LR_MAX = 1e3  # beyond it SGD overflows float32 parameters within a few steps
# One global batch of synthetic images is held in memory (train.data): float32, 3 channels.
SYNTHETIC_BATCH_MAX_BYTES = 8 << 30


def _within(name: str, value: int | None, low: int, high: int) -> None:
    if value is None:
        return
    if not low <= value <= high:
        raise UsageError(f"{name}: expected an integer in {low}..{high}: got {value}")


def _real_within(
    name: str, value: float, low: float, high: float, low_open: bool, high_open: bool
) -> None:
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not (math.isfinite(value) and above and below):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise UsageError(f"{name}: expected a finite number in {interval}: got {value}")


def _check_tolerance(cfg: TrainConfig) -> None:
    if cfg.tolerance is None:
        return
    if not cfg.validate:
        # Silently ignoring it would let a user believe the run was checked.
        raise UsageError("--tolerance applies only with --validate")
    if not (math.isfinite(cfg.tolerance) and cfg.tolerance > 0):
        raise UsageError(f"--tolerance must be a positive finite number: got {cfg.tolerance}")


def _check_numbers(cfg: TrainConfig) -> None:
    for name, (low, high) in INT_BOUNDS.items():
        _within(f"--{name.replace('_', '-')}", getattr(cfg, name), low, high)
    _within("--seed", cfg.seed, 0, SEED_MAX)
    _real_within("--lr", cfg.lr, 0, LR_MAX, low_open=True, high_open=False)
    _real_within("--momentum", cfg.momentum, 0, 1, low_open=False, high_open=True)
    _real_within("--weight-decay", cfg.weight_decay, 0, 1, low_open=False, high_open=False)
    if cfg.data == "synthetic":
        nbytes = cfg.batch_size * 3 * cfg.image_size**2 * 4
        if nbytes > SYNTHETIC_BATCH_MAX_BYTES:
            raise UsageError(
                f"-b {cfg.batch_size} x --image-size {cfg.image_size}: one synthetic batch "
                f"(b x 3 x N x N float32) is {nbytes / 2**30:.1f} GiB: expected at most "
                f"{SYNTHETIC_BATCH_MAX_BYTES >> 30} GiB"
            )


def check_train_config(cfg: TrainConfig) -> None:
    """Argument checks that need neither MPI nor torch (same verdict on every rank)."""
    _check_numbers(cfg)
    _check_tolerance(cfg)
    if cfg.model == "resnet" and (cfg.depth - 2) % 8:
        raise UsageError(
            f"--depth {cfg.depth}: expected 10, 18, 26, ... (2 + 8 k: k basic blocks in each "
            "of 4 stages)"
        )
    if cfg.first_bucket <= 0 or cfg.bucket_cap <= 0:
        raise UsageError("--bucket-cap and --first-bucket must be positive sizes")
    if (cfg.resume or cfg.checkpoint_every) and not cfg.checkpoint_dir:
        raise UsageError("--resume and --checkpoint-every need --checkpoint-dir")
    if cfg.table and not os.path.isfile(cfg.table):
        raise UsageError(f"--table {cfg.table}: no such file")
    _check_table_check(cfg)


def _check_table_check(cfg: TrainConfig) -> None:
    """--check-table (and --adapt, --write-table, which run it) checks a table's allreduce
    choices: it needs --table, and --allreduce would override what it checks."""
    if not cfg.checks_table:
        return
    given = "--check-table" if cfg.check_table else "--adapt" if cfg.adapt else "--write-table"
    if not cfg.table:
        raise UsageError(f"{given} checks a tuning table's choices in training: give --table")
    if cfg.allreduce:
        raise UsageError(
            f"{given} checks the table's allreduce choices: --allreduce {cfg.allreduce} "
            "would replace them (drop one of the two)"
        )
    if cfg.write_table and os.path.realpath(cfg.write_table) == os.path.realpath(cfg.table):
        raise UsageError(
            f"--write-table {cfg.write_table} is the --table file: the table measured in "
            "training is written beside the one it checks, never over it (choose a new name)"
        )


def check_output_paths(cfg: TrainConfig, rank: int) -> None:
    """UsageError naming the option unless this rank can write what it will write at the
    end (rank 0: --json, --save-params) and its checkpoints (every rank), so that no run
    trains to lose its result."""
    if rank == 0:
        check_writable_file("--json", cfg.json)
        check_writable_file("--save-params", cfg.save_params)
        check_writable_file("--write-table", cfg.write_table)
    if cfg.checkpoint_dir and cfg.checkpoint_every:  # --resume alone only reads
        root = Path(cfg.checkpoint_dir)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"--checkpoint-dir {root}: cannot create it: {exc.strerror or exc}"
            ) from None
        probe_directory("--checkpoint-dir", str(root), root)


def buffer_kind(device: str, buffers: str) -> str:
    """The buffer kind the selector decides for: 'cuda' on the GPU, else --buffers."""
    if device != "cuda":
        return buffers
    if buffers != "cpu":
        raise UsageError(
            f"--device cuda keeps the buckets on the GPU: --buffers {buffers} is for CPU"
        )
    return "cuda"


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None  # importable but not installed as a distribution: not ours to judge


def _release(version: str) -> tuple[int, ...]:
    """(2, 13, 0) of '2.13.0+cpu'; the leading numbers only."""
    numbers = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(n) for n in numbers.group().split(".")) if numbers else ()


def require_libraries(cfg: TrainConfig) -> None:
    """UsageError naming the extra to install if torch (or scikit-learn for digits) is
    missing, or torch is older than TORCH_FLOOR. Looks them up without importing them
    (torch takes seconds to import)."""
    if importlib.util.find_spec("torch") is None:
        raise UsageError(f"train needs PyTorch, which is not installed: {TORCH_EXTRA}")
    version = _installed_version("torch")
    if version is not None and _release(version) < TORCH_FLOOR:
        floor = ".".join(map(str, TORCH_FLOOR))
        raise UsageError(
            f"train needs torch >= {floor} (checkpoints are read with weights_only=True, "
            f"which older releases let crafted files get around): found {version}; "
            f"{TORCH_EXTRA}"
        )
    if cfg.buffers == "cuda" and importlib.util.find_spec("cupy") is None:
        raise UsageError(
            "--device cuda hands the buckets to the collectives as cupy arrays: cupy is not "
            "installed (pip install 'osu-dl-bench[cuda]')"
        )
    if cfg.data == "digits" and importlib.util.find_spec("sklearn") is None:
        raise UsageError(
            f"--data digits needs scikit-learn (its bundled digits set): {SKLEARN_EXTRA}"
        )


# Options a rank may hold alone: where rank 0 writes, how a rank shows progress, its
# own thread count and checkpoint path (node-local disks differ).
_RANK_OWN_OPTIONS = (
    "json",
    "save_params",
    "write_table",
    "progress",
    "threads",
    "checkpoint_dir",
)


def settings_every_rank_shares(cfg: TrainConfig) -> dict[str, object]:
    """The options (and the table's bytes) that decide which calls a rank makes: ranks
    that differ would wait for each other or pick different algorithms for one call."""
    shared = {k: v for k, v in asdict(cfg).items() if k not in _RANK_OWN_OPTIONS}
    if cfg.table:
        shared["table"] = file_fingerprint(cfg.table, "--table")
    return shared
