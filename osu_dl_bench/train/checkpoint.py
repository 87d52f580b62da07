"""Atomic checkpoints of a data-parallel run, resume, and the fault hook that tests them.

Layout under the checkpoint directory::

    latest                     text: the name of the newest complete checkpoint
    step-00000040/meta.json    step, epoch position, world size, global batch, model
    step-00000040/state.pt     rank 0: model and optimizer state_dicts (replicas agree)
    step-00000040/rng-rank<r>.pt  every rank: its torch, numpy and Python RNG states

Writing is atomic: every rank writes into ``step-N.partial`` (each file via a temporary
name and os.replace), a barrier, then rank 0 renames the directory to ``step-N`` and
replaces ``latest``. Each rename is followed by an fsync of the directory holding it, so
after a power loss too ``latest`` names a complete checkpoint. What a crash mid-write
leaves (``step-*.partial`` directories, ``.latest.tmp``) is pruned when a run starts and after
each save. The sampler needs only the step (its batches are a function of it:
train.data). Files are read with ``torch.load(weights_only=True)`` (torch >= 2.10, whose
loader has no known way around it): tensors and plain containers only, no code runs.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
import sys
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from osu_dl_bench.errors import UsageError
from osu_dl_bench.paths import fsync_directory, write_atomic, write_text_atomic
from osu_dl_bench.runtime.metadata import utc_now

FORMAT = "osu-dl-bench train checkpoint"
VERSION = 1
LATEST = "latest"
FAULT_ENV = "OSU_DL_BENCH_TRAIN_FAULT"
FAULT_EXIT_CODE = 75
_STEP_NAME = re.compile(r"step-\d{8}")


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
        write_text_atomic(partial / "meta.json", json.dumps(stamped))
    barrier()  # every rank's files are in place
    final = root / _name(meta.step)
    if rank == 0:
        if final.exists():  # left by a run that crashed after renaming, before 'latest'
            shutil.rmtree(final)
        os.replace(partial, final)
        fsync_directory(root)
        write_text_atomic(root / LATEST, final.name + "\n")
        _prune(root, keep)
        # Safe while training goes on: no rank can start the next save before rank 0
        # has joined the next step's gradient allreduce.
        prune_leftovers(root)
    return final


def _prune(root: Path, keep: int) -> None:
    """Remove all but the newest ``keep`` complete checkpoints."""
    complete = sorted(p for p in root.glob("step-*") if p.is_dir() and "." not in p.name)
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def prune_leftovers(directory: str | os.PathLike) -> int:
    """Remove what a crash mid-write left in ``directory`` (rank 0, while no rank is
    saving): ``step-*.partial`` directories and the temporary of ``latest`` (only names
    this module writes: the directory may hold the user's files too). How many went."""
    root = Path(directory)
    if not root.is_dir():
        return 0
    leftovers = [*root.glob("step-*.partial"), *root.glob(f".{LATEST}.tmp")]
    for path in leftovers:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if leftovers:
        fsync_directory(root)
    return len(leftovers)


# 'latest' holds "step-NNNNNNNN\n": anything much longer is not ours and is not shown.
_POINTER_MAX_BYTES = 64


def _read_pointer(pointer: Path) -> str:
    """The text of ``latest``, refusing a symlink (it could lead to any file, whose
    contents an error message would then show) and anything over _POINTER_MAX_BYTES."""
    if pointer.is_symlink():
        raise UsageError(f"checkpoint {pointer} is a symbolic link: expected a small file")
    try:
        fd = os.open(pointer, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(_POINTER_MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"checkpoint {pointer}: cannot read: {exc.strerror or exc}") from None
    if len(data) > _POINTER_MAX_BYTES:
        raise UsageError(
            f"checkpoint {pointer} is over {_POINTER_MAX_BYTES} bytes: expected the name of "
            "a checkpoint, step-NNNNNNNN"
        )
    return data.decode("utf-8", errors="replace").strip()


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint, or None if there is none."""
    pointer = Path(directory) / LATEST
    if not (pointer.is_file() or pointer.is_symlink()):
        return None
    name = _read_pointer(pointer)
    if not _STEP_NAME.fullmatch(name):
        # Only our own names: the pointer must not lead out of the directory. A short
        # repr only: the file is not ours.
        shown = repr(name[:24]) + ("..." if len(name) > 24 else "")
        raise UsageError(f"checkpoint {pointer} holds {shown}: expected step-NNNNNNNN")
    path = Path(directory) / name
    if not (path / "meta.json").is_file():
        raise UsageError(f"checkpoint {pointer} names {path.name}, which is incomplete")
    return path


def load_checkpoint(path: Path, expected: CheckpointMeta, rank: int) -> tuple[int, dict]:
    """(step, state) of the checkpoint at ``path`` after checking it fits this run; this
    rank's RNG states are restored."""
    meta = _read_meta(path / "meta.json")
    for key in ("nprocs", "global_batch", "model", "data"):
        if meta.get(key) != getattr(expected, key):
            raise UsageError(
                f"{path} was written with {key}={meta.get(key)}, this run has "
                f"{getattr(expected, key)}: resume with the same settings"
            )
    state = _load(path / "state.pt")
    set_rng_state(_load(path / f"rng-rank{rank}.pt"))
    return int(meta["step"]), state


def _read_meta(file: Path) -> dict[str, Any]:
    try:
        meta = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{file}: not JSON or unreadable ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise UsageError(f"{file.parent}: not a version-{VERSION} {FORMAT}")
    if not isinstance(meta.get("step"), int) or meta["step"] < 0:
        raise UsageError(f"{file}: step {meta.get('step')!r} is not a count of steps")
    return meta


def _load(file: Path) -> Any:
    """``torch.load(weights_only=True)``; a refused or unreadable file is a UsageError
    of one line of ours (torch's text advises weights_only=False, which runs the file)."""
    try:
        with warnings.catch_warnings():
            # e.g. "Detected pickle protocol 4": noise beside the refusal that follows.
            warnings.simplefilter("ignore")
            return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UsageError(
            f"checkpoint {file}: refused by torch.load(weights_only=True): {_refused(exc)}"
        ) from None
    except Exception as exc:  # damaged bytes make the unpickler raise anything (IndexError)
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise UsageError(
            f"checkpoint {file} cannot be read: {type(exc).__name__}: {first[:120]}"
        ) from None


def _refused(exc: Exception) -> str:
    """What torch's weights_only unpickler refused, in our words."""
    text = str(exc)
    needed = re.search(r"GLOBAL ([\w.]+)", text)
    if needed:
        return f"it needs {needed.group(1)[:100]}, which a checkpoint of this trainer never holds"
    operand = re.search(r"Unsupported operand (\d+)", text)
    if operand:
        return (
            f"it holds pickle opcode {operand.group(1)}, which no checkpoint of this trainer holds"
        )
    return "it holds more than tensors and plain containers"


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
