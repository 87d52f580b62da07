"""One ``train-bench`` launch inside its MPI job: start MPI at the trainer's thread level,
build the launch's configurations (train.comparison), measure each in every round, the
order rotated from round to round, and give rank 0's record of the launch.

A round runs every configuration for ``warmup`` untimed and ``steps`` timed steps; a
measurement is the global batch times the steps over the slowest rank's time, with our
trainer's gradient communication per step averaged over ranks (busy, exposed after
backward: train.reducer, on the step's clock, CUDA events on GPUs).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from osu_dl_bench.jobs.progress import encode_event
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.train.bench_config import TrainBenchConfig, workload


def _measure(
    session, trainer, data, sampler, warmup: int, steps: int, offset: int
) -> dict[str, Any]:
    """img/s of the job over ``steps`` steps after ``warmup`` (slowest rank's time), and
    the gradient communication per step averaged over ranks (where the trainer times it:
    DDP does not)."""
    import numpy as np

    for step in range(offset, offset + warmup):
        trainer.step(*data.train.take(sampler.local_indices(step)))
    session.barrier()
    start = time.perf_counter()
    comms = [
        trainer.step(*data.train.take(sampler.local_indices(step))).comm
        for step in range(offset + warmup, offset + warmup + steps)
    ]
    mine = [time.perf_counter() - start, sum(c.busy for c in comms), sum(c.exposed for c in comms)]
    gathered = session.allgather(np.array(mine))
    measured = {"img_per_s": sampler.global_batch * steps / float(gathered[:, 0].max())}
    busy, exposed = gathered[:, 1].mean() / steps, gathered[:, 2].mean() / steps
    if busy > 0:
        measured |= {"busy_ms": busy * 1e3, "exposed_ms": exposed * 1e3, "clock": comms[0].clock}
    return measured


def rotated_order(labels: list[str], round_index: int) -> list[str]:
    """The configurations in the order of one round: shifted by one from round to round."""
    shift = round_index % len(labels)
    return labels[shift:] + labels[:shift]


def _rounds(cfg: TrainBenchConfig, session, trainers, data, sampler, group: str) -> list[dict]:
    """Every configuration once per round, the order rotated from round to round."""
    rows = []
    where = f"launch {cfg.launch}/{cfg.launches} {group} "
    for index in range(cfg.rounds):
        for label in rotated_order(list(trainers), index):
            if session.rank == 0 and cfg.part:
                # For the command following the launch: what a stall stopped.
                what = f"{label} ({where}round {index + 1}/{cfg.rounds})"
                print(encode_event("measuring", what=what), flush=True)
            offset = index * (cfg.warmup + cfg.steps)
            found = _measure(session, trainers[label], data, sampler, cfg.warmup, cfg.steps, offset)
            row = {"launch": cfg.launch, "group": group, "round": index, "config": label}
            rows.append({**row, **found})
            if session.rank == 0:
                rate = found["img_per_s"]
                print(
                    f"{where}round {index + 1}/{cfg.rounds} {label}: {rate:.1f} img/s", flush=True
                )
    return rows


def thread_counts() -> dict[str, Any]:
    """This process's threads: Python's, the OS's (/proc/self/status; None elsewhere), and
    whether torch.distributed's default (Gloo) group exists."""
    import torch.distributed as dist

    process = None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                process = int(line.split()[1])
    except OSError:
        pass
    return {
        "python_threads": threading.active_count(),
        "process_threads": process,
        "torch_distributed": bool(dist.is_available() and dist.is_initialized()),
    }


def measure_launch(cfg: TrainBenchConfig) -> dict[str, Any] | None:
    """Inside mpiexec: build this launch's configurations, measure them in rotated rounds;
    rank 0's record of the launch (None on the other ranks)."""
    from osu_dl_bench.train.config import init_training_mpi

    # MPI starts first, at the trainer's thread level: the registry (train.comparison's
    # imports) would start it at import, at mpi4py's default level.
    mpi, note = init_training_mpi()
    import torch

    from osu_dl_bench.train.comm_thread import CommThread
    from osu_dl_bench.train.comparison import (
        build_trainers,
        configurations,
        in_launch,
        only_these,
    )
    from osu_dl_bench.train.data import ShardedSampler, load_data
    from osu_dl_bench.train.device import place
    from osu_dl_bench.train.session import Session, thread_level_note, threads_may_call_mpi

    train_cfg = workload(cfg)
    inline = not threads_may_call_mpi()  # then no configuration overlaps: say so
    notes = [line for line in (note, thread_level_note() if inline else None) if line]
    with CommThread(inline) as thread:
        session = Session.open(mpi.COMM_WORLD, train_cfg, thread)
        if session.rank == 0 and notes:
            print("\n".join(notes), flush=True)
        ppn = session.topology.ppn
        torch.set_num_threads(train_cfg.threads or max(1, (os.cpu_count() or 1) // ppn))
        device = place(train_cfg.buffers, session)
        data = load_data(train_cfg)
        sampler = ShardedSampler(
            len(data.train), train_cfg.batch_size, session.nprocs, session.rank, 0
        )
        configs, skipped = configurations(session, train_cfg, cfg.table, cfg.adapted_table)
        configs, left_out = session.agree(lambda: only_these(configs, cfg.only))
        skipped += left_out
        here = [c for c in configs if in_launch(c.label, c.group, cfg.group)]
        trainers = build_trainers(session, train_cfg, data, here, device)
        start = time.perf_counter()
        rows = _rounds(cfg, session, trainers, data, sampler, cfg.group or "all")
        seconds = time.perf_counter() - start
        if session.rank != 0:
            return None
        record = _launch_record(cfg, session, rows, skipped, configs, trainers)
        return record | {"seconds": seconds, "notes": notes, **thread_counts()}


def _launch_record(cfg: TrainBenchConfig, session, rows, skipped, configs, trainers):
    """Rank 0's record of one launch."""
    import torch

    from osu_dl_bench.runtime.metadata import collect_metadata
    from osu_dl_bench.train.models import parameter_count

    topology = session.topology
    metadata = collect_metadata(topology).as_dict()
    return {
        "launch": cfg.launch,
        "group": cfg.group or "all",
        "device": cfg.device,
        "nprocs": session.nprocs,
        "nodes": topology.nodes,
        "ppn": topology.ppn,
        "hosts": sorted(set(topology.hostnames)),
        "global_batch": cfg.batch_size,
        "steps": cfg.steps,
        "configs": {c.label: c.group for c in configs},
        "measured": list(trainers),
        "rows": rows,
        "skipped": skipped,
        "parameters": parameter_count(next(iter(trainers.values())).model),
        "torch_threads": torch.get_num_threads(),
        "metadata": metadata,
        # The run directory's identity of the run (merge compares them).
        **{name: metadata[name] for name in ("mpi_library", "mpi_version", "mpi4py_version")},
    }


def write_launch_record(path: str, record: dict[str, Any]) -> None:
    """The launch's record as one JSON line where the command asked (--part)."""
    write_text_atomic(path, json.dumps(record) + "\n")
