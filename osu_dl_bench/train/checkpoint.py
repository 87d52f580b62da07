"""Atomic checkpoints of a data-parallel run, resume, and the fault hook that tests them.

Layout under the checkpoint directory::

    latest                     text: the name of the newest complete checkpoint
    step-00000040/meta.json    step, epoch position, world size, global batch, model
    step-00000040/state.pt     rank 0: model and optimizer state_dicts (replicas agree)
    step-00000040/rng-rank<r>.pt  every rank: its torch, numpy and Python RNG states

Writing is atomic: every rank writes into ``step-N.partial`` (each file via a temporary
name and os.replace), a barrier, then rank 0 renames the directory to ``step-N`` and
replaces ``latest``. A crash at any point leaves ``latest`` naming a complete checkpoint.
The sampler needs only the step (its batches are a function of it: train.data).
Files are read with ``torch.load(weights_only=True)``: plain tensors and containers.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime import utc_now

FORMAT = "osu-dl-bench train checkpoint"
VERSION = 1
LATEST = "latest"
FAULT_ENV = "OSU_DL_BENCH_TRAIN_FAULT"
FAULT_EXIT_CODE = 75


@dataclass(frozen=True)
class CheckpointMeta:
    """What a checkpoint is of: where training stood and the run it must resume."""

    step: int  # completed global steps
    nprocs: int
    global_batch: int
    model: str
    data: str
    format: str = FORMAT
    version: int = VERSION
    created: str = ""


def _name(step: int) -> str:
    return f"step-{step:08d}"


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` then rename over ``path``, with the data on disk before the rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def rng_state() -> dict[str, Any]:
    """This process's RNG states, as tensors and plain values (weights_only-loadable)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": [version, torch.tensor(internal, dtype=torch.int64), gauss],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what rng_state returned."""
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(int(v) for v in internal.tolist()), gauss))


def save_checkpoint(
    directory: str | os.PathLike,
    meta: CheckpointMeta,
    rank: int,
    state: Callable[[], dict[str, Any]],
    barrier: Callable[[], None],
    keep: int = 2,
) -> Path:
    """Write one checkpoint (collective: every rank calls it at the same step)."""
    root = Path(directory)
    partial = root / f"{_name(meta.step)}.partial"
    partial.mkdir(parents=True, exist_ok=True)
    write_atomic(partial / f"rng-rank{rank}.pt", lambda p: torch.save(rng_state(), p))
    if rank == 0:
        write_atomic(partial / "state.pt", lambda p: torch.save(state(), p))
        stamped = {**asdict(meta), "created": utc_now()}
        write_atomic(partial / "meta.json", lambda p: p.write_text(json.dumps(stamped)))
    barrier()  # every rank's files are in place
    final = root / _name(meta.step)
    if rank == 0:
        if final.exists():  # left by a run that crashed after renaming, before 'latest'
            shutil.rmtree(final)
        os.replace(partial, final)
        write_atomic(root / LATEST, lambda p: p.write_text(final.name + "\n"))
        _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    """Remove all but the newest ``keep`` complete checkpoints."""
    complete = sorted(p for p in root.glob("step-*") if p.is_dir() and "." not in p.name)
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint, or None if there is none."""
    pointer = Path(directory) / LATEST
    if not pointer.is_file():
        return None
    path = Path(directory) / pointer.read_text().strip()
    if not (path / "meta.json").is_file():
        raise UsageError(f"checkpoint {pointer} names {path.name}, which is incomplete")
    return path


def load_checkpoint(path: Path, expected: CheckpointMeta, rank: int) -> tuple[int, dict]:
    """(step, state) of the checkpoint at ``path`` after checking it fits this run; this
    rank's RNG states are restored."""
    meta = json.loads((path / "meta.json").read_text())
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise UsageError(f"{path}: not a version-{VERSION} {FORMAT}")
    for key in ("nprocs", "global_batch", "model", "data"):
        if meta[key] != getattr(expected, key):
            raise UsageError(
                f"{path} was written with {key}={meta[key]}, this run has "
                f"{getattr(expected, key)}: resume with the same settings"
            )
    state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    set_rng_state(torch.load(path / f"rng-rank{rank}.pt", weights_only=True))
    return int(meta["step"]), state


def parse_fault(text: str) -> tuple[int, int] | None:
    """OSU_DL_BENCH_TRAIN_FAULT='RANK:STEP' -> (rank, step); '' -> None."""
    if not text.strip():
        return None
    rank, sep, step = text.partition(":")
    if not (sep and rank.strip().isdigit() and step.strip().isdigit()):
        raise UsageError(f"{FAULT_ENV}={text!r}: expected RANK:STEP, e.g. 1:7")
    return int(rank), int(step)


def maybe_fault(fault: tuple[int, int] | None, rank: int, step: int) -> None:
    """Test hook: die abruptly (no cleanup, no MPI_Finalize) after global step ``step``."""
    if fault == (rank, step):
        print(f"[rank {rank}] {FAULT_ENV}: exiting after step {step}", file=sys.stderr, flush=True)
        os._exit(FAULT_EXIT_CODE)
