"""``osu-dl-bench train-bench``: training throughput of our trainer with native MPI
allreduce, with each fixed algorithm of the registry, with the tuned selector (also with
the gradient buckets in registered memory, where cma reads the peers' buckets directly),
and of PyTorch DDP over Gloo.

    osu-dl-bench train-bench [--np 2] [--rounds 5] [--steps 8] [--table T.json]
                             [--out results/train_p2] [--timeout 3600]

The command launches one MPI job (itself again, with --worker) that builds every
configuration on the same model, batch and data, then measures them interleaved: in each
round every configuration runs ``--warmup`` untimed and ``--steps`` timed steps, in an
order rotated from round to round, because the machine's speed swings up to 3x over
minutes. A measurement is the global batch times the steps over the slowest rank's time.
Reported: medians over rounds, and per-round ratios against DDP-Gloo and against native
(median [min..max]). Writes OUT.json (every measurement and the summary) and OUT.txt
(the table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from osu_dl_bench.commands.train_bench_options import job_config, worker_argv

DDP = "ddp-gloo"
TUNED = "tuned"
TARGET = 1.1  # tuned / DDP-Gloo: the throughput the tuned trainer is expected to reach


def run_train_bench(args: argparse.Namespace) -> int:
    """Launch the measuring job, or (with --worker, inside it) measure."""
    if args.worker:
        return _run_worker(args)
    from osu_dl_bench.train.options import require_libraries

    require_libraries(_config(args))  # one message and exit 2 before any job starts
    return launch_job(job_command(args), args.timeout)


def job_command(args: argparse.Namespace) -> list[str]:
    """'mpiexec -n NP python -m osu_dl_bench train-bench --worker OPTIONS'."""
    from osu_dl_bench.jobs.launch import mpi_command

    return mpi_command(args.np, ["-m", "osu_dl_bench", *worker_argv(args)])


def launch_job(cmd: list[str], timeout: float) -> int:
    """Run the job to its end and return its exit code; stop it past ``timeout`` seconds
    (exit 1) or on Ctrl-C (exit 130), so a hung job never hangs the command."""
    from osu_dl_bench.jobs import launch

    try:
        return launch.run(cmd, timeout, stdout=None, stderr=None).returncode
    except subprocess.TimeoutExpired:
        print(
            f"osu-dl-bench: error: the train-bench job did not finish within {timeout:g} s "
            "(--timeout) and was stopped",
            file=sys.stderr,
            flush=True,
        )
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: the train-bench job was stopped", file=sys.stderr, flush=True)
        return 130


# --- inside the job ---------------------------------------------------------------------


def _config(args: argparse.Namespace):
    from osu_dl_bench.train.options import TrainConfig

    return TrainConfig(
        model=args.model,
        data="synthetic",
        batch_size=args.batch_size,
        depth=args.depth,
        width=args.width,
        image_size=args.image_size,
        num_classes=args.num_classes,
        synthetic_batches=4,
        threads=args.threads,
        lr=0.01,
    )


def _fixed_policies(session) -> tuple[list[tuple[str, object]], list[str]]:
    """(label, policy) per eligible allreduce algorithm, and why the others are skipped."""
    from collectives import algorithms
    from osu_dl_bench.train.policy import FixedPolicy, call_context

    ctx = call_context(session.topology, "allreduce", "float32")
    chosen, skipped = [], []
    for algorithm in algorithms("allreduce"):
        variant = algorithm.variant()
        reason = variant.ineligible_reason(ctx)
        if reason:
            skipped.append(f"{variant.label}: skipped: {reason}")
            continue
        policy = FixedPolicy(session.comm, session.topology, {"allreduce": variant}, session.policy)
        chosen.append((variant.label, policy))
    return chosen, skipped


def _tuned_policy(session, cfg, table: str | None):
    """(the selector's policy over ``table``, "") or (None, why there is none)."""
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.train.policy import build_policy

    if not table:
        return None, "skipped: no tuning table given (--table); make one with osu-dl-bench tune"
    with_table = replace(cfg, table=table)
    try:
        policy = session.agree(lambda: build_policy(with_table, session.comm, session.topology))
    except UsageError as exc:
        return None, f"skipped: {exc}"
    return policy, ""


def _measure(session, trainer, data, sampler, warmup: int, steps: int, offset: int) -> float:
    """img/s of the job over ``steps`` steps after ``warmup`` (slowest rank's time)."""
    import numpy as np

    for step in range(offset, offset + warmup):
        trainer.step(*data.train.take(sampler.local_indices(step)))
    session.barrier()
    start = time.perf_counter()
    for step in range(offset + warmup, offset + warmup + steps):
        trainer.step(*data.train.take(sampler.local_indices(step)))
    elapsed = session.allgather(np.array([time.perf_counter() - start])).max()
    return sampler.global_batch * steps / float(elapsed)


def _trainers(session, cfg, data, table: str | None) -> tuple[dict, list[str]]:
    """Every configuration on its own replica of the same model, state broadcast."""
    import torch

    from collectives import registered
    from osu_dl_bench.train.ddp_gloo import DDPGlooTrainer
    from osu_dl_bench.train.models import build_model
    from osu_dl_bench.train.trainer import DataParallelTrainer

    policies, skipped = _fixed_policies(session)
    tuned, why = _tuned_policy(session, cfg, table)
    if tuned is not None:
        policies.append((TUNED, tuned))
    else:
        skipped.append(f"{TUNED}: {why}")

    def model():
        torch.manual_seed(cfg.seed + session.rank)
        return build_model(cfg, data.shape)

    # Overlap costs a core while the communication thread polls; with as many ranks as
    # cores it may not pay, so native and tuned are measured without it too.
    serial = [(f"{label}/no-overlap", p) for label, p in policies if label in ("native", TUNED)]
    trainers = {
        label: DataParallelTrainer(model(), cfg, replace(session, policy=policy))
        for label, policy in policies
    }
    for label, policy in serial:
        no_overlap = replace(cfg, overlap=False)
        trainers[label] = DataParallelTrainer(model(), no_overlap, replace(session, policy=policy))
    # Gradient buckets in registered memory (--buffers cpu-registered): the same choices,
    # but cma reads the peers' buckets directly.
    if registered.unavailable_reason() is None:
        on_registered = replace(cfg, buffers="cpu-registered")
        for label, policy in policies:
            if label.partition(":")[0] in (TUNED, "cma"):  # cma: its default variant
                trainers[f"{label}/registered"] = DataParallelTrainer(
                    model(), on_registered, replace(session, policy=policy)
                )
                trainers[f"{label}/registered/no-overlap"] = DataParallelTrainer(
                    model(), replace(on_registered, overlap=False), replace(session, policy=policy)
                )
    else:
        skipped.append(f"registered buckets: skipped: {registered.unavailable_reason()}")
    trainers[DDP] = DDPGlooTrainer(model(), cfg, session)
    for trainer in trainers.values():
        trainer.broadcast_state(0)
    return trainers, skipped


def rotated_order(labels: list[str], round_index: int) -> list[str]:
    """The configurations in the order of one round: shifted by one from round to round."""
    shift = round_index % len(labels)
    return labels[shift:] + labels[:shift]


def _rounds(args, session, trainers, data, sampler) -> list[dict]:
    """Every configuration once per round, the order rotated from round to round."""
    rows = []
    for index in range(args.rounds):
        for label in rotated_order(list(trainers), index):
            offset = index * (args.warmup + args.steps)
            rate = _measure(
                session, trainers[label], data, sampler, args.warmup, args.steps, offset
            )
            rows.append({"round": index, "config": label, "img_per_s": rate})
            if session.rank == 0:
                print(f"round {index + 1}/{args.rounds} {label}: {rate:.1f} img/s", flush=True)
    return rows


def _run_worker(args: argparse.Namespace) -> int:
    """Inside mpiexec: build every configuration, measure them in rotated rounds."""
    from osu_dl_bench.train.options import init_training_mpi

    mpi, note = init_training_mpi()
    import torch

    from osu_dl_bench.train.comm_thread import CommThread
    from osu_dl_bench.train.data import ShardedSampler, load_data
    from osu_dl_bench.train.session import Session, thread_level_note, threads_may_call_mpi

    cfg = _config(args)
    inline = not threads_may_call_mpi()  # then no configuration overlaps: say so
    notes = [line for line in (note, thread_level_note() if inline else None) if line]
    with CommThread(inline) as thread:
        session = Session.open(mpi.COMM_WORLD, cfg, thread)
        if session.rank == 0 and notes:
            print("\n".join(notes), flush=True)
        ppn = session.topology.ppn
        torch.set_num_threads(cfg.threads or max(1, (os.cpu_count() or 1) // ppn))
        data = load_data(cfg)
        sampler = ShardedSampler(len(data.train), cfg.batch_size, session.nprocs, session.rank, 0)
        trainers, skipped = _trainers(session, cfg, data, args.table)
        rows = _rounds(args, session, trainers, data, sampler)
        if session.rank == 0:
            _write(args, cfg, session, rows, skipped, trainers)
    return 0


# --- the report -------------------------------------------------------------------------


def ratio_text(rows: list[dict], label: str, base: str) -> tuple[str, float | None]:
    """('median [min..max]' of label / base over the rounds both ran, the median)."""
    by_round: dict[Any, dict[str, float]] = {}
    for row in rows:
        by_round.setdefault(row["round"], {})[row["config"]] = row["img_per_s"]
    ratios = [r[label] / r[base] for r in by_round.values() if label in r and base in r]
    if not ratios:
        return "-", None
    median = statistics.median(ratios)
    return f"{median:.2f} [{min(ratios):.2f}..{max(ratios):.2f}]", median


def verdict(summary: dict) -> tuple[str, float | None]:
    """The target, judged on the best of the tuned rows (with and without overlap)."""
    tuned = {k: v["vs_ddp"] for k, v in summary.items() if k.startswith(TUNED) and v["vs_ddp"]}
    if not tuned:
        return "no tuned configuration measured", None
    best = max(tuned, key=tuned.get)
    met = "MET" if tuned[best] >= TARGET else "NOT MET"
    return f"{best} / {DDP} = {tuned[best]:.2f} (median of per-round ratios): {met}", tuned[best]


def report_table(
    args, cfg, nprocs: int, params: int, threads: int, rows: list[dict], skipped: list[str]
) -> tuple[str, dict]:
    """(text, per-configuration summary) of the measurements."""
    lines = [
        f"# training throughput at p={nprocs}: {cfg.model} depth {cfg.depth} width "
        f"{cfg.width} ({params:,} parameters), {cfg.image_size}x{cfg.image_size} synthetic "
        f"images, global batch {cfg.batch_size}, torch threads {threads}",
        f"# {args.rounds} rounds, configurations interleaved (order rotated per round), "
        f"{args.warmup} warm-up + {args.steps} timed steps each; img/s = global batch x steps "
        f"/ slowest rank's time; ratios: median [min..max] of per-round ratios",
        f"{'config':<38}{'img/s (median)':>16}{'vs ' + DDP:>24}{'vs native':>24}",
    ]
    summary = {}
    for label in dict.fromkeys(r["config"] for r in rows):
        median = statistics.median(r["img_per_s"] for r in rows if r["config"] == label)
        vs_ddp, ddp_ratio = ratio_text(rows, label, DDP)
        vs_native, _ = ratio_text(rows, label, "native")
        summary[label] = {"median_img_per_s": median, "vs_ddp": ddp_ratio}
        lines.append(f"{label:<38}{median:>16.1f}{vs_ddp:>24}{vs_native:>24}")
    lines += [f"# {s}" for s in skipped]
    lines.append(f"# target tuned >= {TARGET}x {DDP}: {verdict(summary)[0]}")
    return "\n".join(lines), summary


def _write(args, cfg, session, rows, skipped, trainers) -> None:
    """Rank 0: print the table, write OUT.txt and OUT.json."""
    import torch

    from osu_dl_bench.runtime import collect_metadata
    from osu_dl_bench.train.models import parameter_count

    params = parameter_count(trainers[DDP].model)
    threads = torch.get_num_threads()
    text, summary = report_table(args, cfg, session.nprocs, params, threads, rows, skipped)
    print(text, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.txt").write_text(text + "\n")
    payload = {
        "config": job_config(args),
        "parameters": params,
        "rows": rows,
        "summary": summary,
        "skipped": skipped,
        "target": {"tuned_vs_ddp": TARGET, "measured": verdict(summary)[1]},
        "metadata": collect_metadata(session.topology).as_dict(),
    }
    Path(f"{out}.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(f"# wrote {out}.txt and {out}.json", flush=True)
