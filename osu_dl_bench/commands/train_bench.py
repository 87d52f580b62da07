"""``osu-dl-bench train-bench``: training throughput of our trainer with native MPI
allreduce, with each fixed algorithm of the registry, with the tuned selector (also with
the gradient buckets in registered memory, where cma reads the peers' buckets directly),
and of PyTorch DDP over Gloo.

    osu-dl-bench train-bench [--np 2] [--launches 3] [--rounds 5] [--steps 8]
                             [--table T.json] [--seed S] [--out results/train_p2]
                             [--timeout 3600]

Isolation (as the sweep's): binding Gloo (DDP's process group, or the registry's
``gloo`` algorithm) starts threads that slow everything else timed in the same process on
a small machine (native allreduce at 8 B: 1.3 -> 61 us). So the configurations that bind
Gloo form the ``gloo`` isolation group and every other one the ``mpi`` group; each group
is measured in MPI launches of its own (this command again, with --worker), and the mpi
group's launches never bind Gloo (each launch records its thread counts to show it).
Native runs in every group, so each group has a common reference.

Launches: launch 1 of every group, then launch 2, ... (``--launches K``), the groups'
order shuffled within each launch with a recorded seed, so neither group always runs first
while the machine drifts. Inside a launch every configuration runs, in each of ``--rounds``
rounds, ``--warmup`` untimed and ``--steps`` timed steps, in an order rotated from round
to round. A measurement is the global batch times the steps over the slowest rank's time.

Reported per configuration: the median img/s over every round of every launch, and its
ratio against DDP-Gloo and against native as exp(median log-ratio) with a 95% interval
(selection/paired.py): within a group paired round by round in each launch, across groups
(tuned against DDP-Gloo) launch k with launch k on the launches' medians; cluster
bootstrap widened to Student's t over the launches. Writes OUT.json (every measurement
with its launch and group, each launch's record, the summary) and OUT.txt (the table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from osu_dl_bench.commands.train_bench_options import job_config, worker_argv
from osu_dl_bench.jobs.plan import MPI_GROUP, group_of
from osu_dl_bench.paths import check_writable_file, write_atomic, write_text_atomic

DDP = "ddp-gloo"
TUNED = "tuned"
NATIVE = "native"
# The group of the gloo backend, the name the sweep gives it (jobs.plan.group_of): DDP's
# process group is Gloo too, with the same threads.
GLOO_GROUP = "gloo"
GROUPS = (MPI_GROUP, GLOO_GROUP)


def run_train_bench(args: argparse.Namespace) -> int:
    """Run every group's launches in turn through the experiment engine, keeping each in
    the run directory OUT, and report; or (with --worker, inside one launch) measure that
    launch's configurations."""
    if args.worker:
        return _run_worker(args)
    check_writable_file("--out", f"{args.out}.txt", make_parents=True)
    from osu_dl_bench.jobs.experiment import RecordedExperiment, Turn, run_recorded
    from osu_dl_bench.jobs.orchestrate import JobFailed, JobOutcome
    from osu_dl_bench.train.options import check_train_config, require_libraries

    # One message and exit 2 before any job starts, and before the run directory exists.
    check_train_config(_config(args))
    require_libraries(_config(args))
    spec = RecordedExperiment(
        "train-bench", job_config(args), args.out, "--out", (args.np,), args.launches, GROUPS,
        resume=args.resume, seed=args.seed,
    )  # fmt: skip

    def launch(turn: Turn) -> JobOutcome:
        _, number, group = turn.job
        print(
            f"# launch {number}/{args.launches}, group {group} ({turn.index} of {turn.total})",
            flush=True,
        )
        what = f"launch {number} of group {group}"
        code = launch_job(job_command(args, number, group, str(turn.part)), args.timeout, what)
        return JobOutcome(code, finished=False, failures=0)

    try:
        found = run_recorded(spec, launch, training_points)
    except JobFailed as exc:
        return exc.code or 1
    if found.code != 0:
        return found.code
    order = [(number, group) for _, number, group in found.order]
    _write(args, merge_parts(found.records, found.seed, order))
    return 0


def launch_order(launches: int, groups: Iterable[str], seed: int) -> list[tuple[int, str]]:
    """(launch, group) in the order they run: the engine's order (jobs.orchestrate) of
    one process count's launches."""
    from osu_dl_bench.jobs.orchestrate import launch_order as engine_order

    keys = [(0, number, group) for number in range(1, launches + 1) for group in groups]
    return [(number, group) for _, number, group in engine_order(launches, (0,), keys, seed)]


def job_command(
    args: argparse.Namespace, launch: int = 1, group: str | None = None, part: str | None = None
) -> list[str]:
    """'mpiexec -n NP python -m osu_dl_bench train-bench --worker OPTIONS' for one launch
    of one group, rank 0 writing its measurements to ``part``."""
    from osu_dl_bench.jobs.launch import mpi_command

    return mpi_command(args.np, ["-m", "osu_dl_bench", *worker_argv(args, launch, group, part)])


def launch_job(cmd: list[str], timeout: float, what: str = "the train-bench job") -> int:
    """Run the job to its end and return its exit code; stop it past ``timeout`` seconds
    (exit 1) or on Ctrl-C (exit 130), so a hung job never hangs the command."""
    from osu_dl_bench.jobs import launch

    try:
        return launch.run(cmd, timeout, stdout=None, stderr=None).returncode
    except subprocess.TimeoutExpired:
        print(
            f"osu-dl-bench: error: {what} did not finish within {timeout:g} s "
            "(--timeout) and was stopped",
            file=sys.stderr,
            flush=True,
        )
        return 1
    except KeyboardInterrupt:
        print(f"\ninterrupted: {what} was stopped", file=sys.stderr, flush=True)
        return 130


# --- isolation groups -------------------------------------------------------------------


def home_group(variants: Iterable[Any]) -> str:
    """The isolation group of a configuration whose calls may run any of ``variants``:
    a backend other than the MPI library's (its group) wins, since binding it once is
    enough to start its threads."""
    others = sorted({group_of(v) for v in variants} - {MPI_GROUP})
    return others[0] if others else MPI_GROUP


def in_launch(label: str, group_of_label: str, group: str | None) -> bool:
    """Whether a launch of ``group`` measures the configuration (native: in every group,
    the common reference; None: one launch measures every configuration)."""
    return group is None or group_of_label == group or label == NATIVE


# --- inside the job ---------------------------------------------------------------------


@dataclass(frozen=True)
class Configuration:
    """One measured configuration: its label, its isolation group, its trainer's options
    and policy (None: DDP over Gloo)."""

    label: str
    group: str
    cfg: Any
    policy: Any = None


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


def _fixed_policies(session) -> tuple[list[tuple[str, object, str]], list[str]]:
    """(label, policy, group) per eligible allreduce algorithm, and why the others are
    skipped. Nothing is bound yet: a policy binds when a trainer is built on it."""
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
        chosen.append((variant.label, policy, group_of(variant)))
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


def selector_variants(selector, topology, device: str) -> list[Any]:
    """Every variant ``selector`` may choose for the trainer's collectives at this job's
    shape: forced, fixed, and every range of the table's entry (choices not registered
    here are left out: the selector runs native instead)."""
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.selection.selector import Query
    from osu_dl_bench.train.policy import TABLE_COLLECTIVES

    variants = [*selector.forced.values(), *selector.fixed.values()]
    for collective in TABLE_COLLECTIVES:
        if collective in selector.forced or collective in selector.fixed:
            continue
        query = Query(collective, topology.nprocs, 0, device, topology.nodes, topology.ppn)
        entry = selector.entry_for(query)
        for size_range in entry.ranges if entry is not None else ():
            try:
                variants.append(size_range.choice.variant(collective))
            except UsageError:
                continue
    return variants


def _configurations(session, cfg, table: str | None) -> tuple[list[Configuration], list[str]]:
    """Every configuration with its group (the same list in every launch), and why some
    are skipped."""
    from collectives import registered

    policies, skipped = _fixed_policies(session)
    tuned, why = _tuned_policy(session, cfg, table)
    if tuned is not None:
        # A table that names Gloo anywhere at this shape binds it: the gloo group's then.
        variants = selector_variants(tuned.selector, session.topology, tuned.device)
        policies.append((TUNED, tuned, home_group(variants)))
    else:
        skipped.append(f"{TUNED}: {why}")
    configs = [Configuration(label, group, cfg, policy) for label, policy, group in policies]
    # Overlap costs a core while the communication thread polls; with as many ranks as
    # cores it may not pay, so native and tuned are measured without it too.
    no_overlap = replace(cfg, overlap=False)
    for label, policy, group in policies:
        if label in (NATIVE, TUNED):
            configs.append(Configuration(f"{label}/no-overlap", group, no_overlap, policy))
    # Gradient buckets in registered memory (--buffers cpu-registered): the same choices,
    # but cma reads the peers' buckets directly.
    if registered.unavailable_reason() is None:
        on_registered = replace(cfg, buffers="cpu-registered")
        serial = replace(on_registered, overlap=False)
        for label, policy, group in policies:
            if label.partition(":")[0] in (TUNED, "cma"):  # cma: its default variant
                configs.append(Configuration(f"{label}/registered", group, on_registered, policy))
                name = f"{label}/registered/no-overlap"
                configs.append(Configuration(name, group, serial, policy))
    else:
        skipped.append(f"registered buckets: skipped: {registered.unavailable_reason()}")
    configs.append(Configuration(DDP, GLOO_GROUP, cfg))
    for config in configs:
        if config.group not in GROUPS:
            skipped.append(f"{config.label}: skipped: binds {config.group}, no launches of its own")
    return [c for c in configs if c.group in GROUPS], skipped


def _trainers(session, cfg, data, configs: list[Configuration]) -> dict:
    """The given configurations, each on its own replica of the same model, state
    broadcast."""
    import torch

    from osu_dl_bench.train.ddp_gloo import DDPGlooTrainer
    from osu_dl_bench.train.models import build_model
    from osu_dl_bench.train.trainer import DataParallelTrainer

    def model():
        torch.manual_seed(cfg.seed + session.rank)
        return build_model(cfg, data.shape)

    trainers = {}
    for config in configs:
        if config.policy is None:
            trainers[config.label] = DDPGlooTrainer(model(), config.cfg, session)
        else:
            on_policy = replace(session, policy=config.policy)
            trainers[config.label] = DataParallelTrainer(model(), config.cfg, on_policy)
    for trainer in trainers.values():
        trainer.broadcast_state(0)
    return trainers


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


def rotated_order(labels: list[str], round_index: int) -> list[str]:
    """The configurations in the order of one round: shifted by one from round to round."""
    shift = round_index % len(labels)
    return labels[shift:] + labels[:shift]


def _rounds(args, session, trainers, data, sampler, group: str) -> list[dict]:
    """Every configuration once per round, the order rotated from round to round."""
    rows = []
    where = f"launch {args.launch}/{args.launches} {group} "
    for index in range(args.rounds):
        for label in rotated_order(list(trainers), index):
            offset = index * (args.warmup + args.steps)
            rate = _measure(
                session, trainers[label], data, sampler, args.warmup, args.steps, offset
            )
            row = {"launch": args.launch, "group": group, "round": index, "config": label}
            rows.append({**row, "img_per_s": rate})
            if session.rank == 0:
                print(
                    f"{where}round {index + 1}/{args.rounds} {label}: {rate:.1f} img/s", flush=True
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


def _run_worker(args: argparse.Namespace) -> int:
    """Inside mpiexec: build this launch's configurations, measure them in rotated rounds."""
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
        configs, skipped = _configurations(session, cfg, args.table)
        here = [c for c in configs if in_launch(c.label, c.group, args.group)]
        trainers = _trainers(session, cfg, data, here)
        start = time.perf_counter()
        rows = _rounds(args, session, trainers, data, sampler, args.group or "all")
        seconds = time.perf_counter() - start
        if session.rank == 0:
            part = _part(args, session, rows, skipped, configs, trainers)
            part |= {"seconds": seconds, "notes": notes, **thread_counts()}
            _write_part(args, part)
    return 0


def _part(args, session, rows, skipped, configs, trainers) -> dict[str, Any]:
    """Rank 0's record of one launch."""
    import torch

    from osu_dl_bench.runtime.metadata import collect_metadata
    from osu_dl_bench.train.models import parameter_count

    topology = session.topology
    metadata = collect_metadata(topology).as_dict()
    return {
        "launch": args.launch,
        "group": args.group or "all",
        "nprocs": session.nprocs,
        "nodes": topology.nodes,
        "ppn": topology.ppn,
        "hosts": sorted(set(topology.hostnames)),
        "global_batch": args.batch_size,
        "steps": args.steps,
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


def _write_part(args, part: dict[str, Any]) -> None:
    """The launch's record where the command asked (--part), else (a worker run by hand)
    the report of this one launch."""
    if args.part:
        write_text_atomic(args.part, json.dumps(part) + "\n")
        return
    _write(args, merge_parts([part], None, [(part["launch"], part["group"])]))


# --- the run directory ------------------------------------------------------------------

# How results.csv names a training step: a point whose candidates are the configurations.
TRAIN_STEP = "train_step"


def training_points(record: dict[str, Any]) -> list[Any]:
    """One launch's record as run-directory points: per configuration, the time of one
    training step in each round (global batch / img/s), as a sweep's candidate at the
    gradients' size (parameters x 4 B), so merge and the run directory's readers take it."""
    steps: dict[str, list[float]] = {}
    for row in sorted(record["rows"], key=lambda r: r["round"]):
        steps.setdefault(row["config"], []).append(record["global_batch"] / row["img_per_s"])
    return [_step_point(record, label, seconds) for label, seconds in steps.items()]


def _step_point(record: dict[str, Any], label: str, seconds: list[float]) -> Any:
    """One configuration's training steps of one launch as a SweepPoint."""
    from dataclasses import asdict

    import numpy as np

    from collectives.specs import SPECS
    from osu_dl_bench.measurement.schedule import round_stats
    from osu_dl_bench.measurement.store import SweepPoint, format_rounds

    nprocs, size = record["nprocs"], record["parameters"] * 4
    stats = round_stats(np.array(seconds).reshape(-1, 1, 1))[0]
    # The gradients' bytes over a step's time; the bus factor is the allreduce's that
    # carries them.
    algbw = size / (stats.median_us * 1e-6) / 1e9
    return SweepPoint(
        collective=TRAIN_STEP,
        backend=record["configs"].get(label, MPI_GROUP),
        algorithm=label,
        dtype="float32",
        op="sum",
        device="cpu",
        size_bytes=size,
        count=record["parameters"],
        nprocs=nprocs,
        nodes=record["nodes"],
        ppn=record["ppn"],
        **asdict(stats),
        rounds=len(seconds),
        iterations=record["steps"],
        algbw_gbs=algbw,
        busbw_gbs=algbw * SPECS["allreduce"].busbw_factor(nprocs),
        validation=None,
        launch=record["launch"],
        group=record["group"],
        round_us=format_rounds(np.array(seconds) * 1e6),
    )


# --- the report -------------------------------------------------------------------------


@dataclass
class Measured:
    """What the launches gave: every row (with its launch and group), each configuration's
    group, each launch's record, and what the report's header names."""

    rows: list[dict]
    home: dict[str, str]
    launches: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    nprocs: int = 0
    parameters: int = 0
    torch_threads: int = 0
    seed: int | None = None
    order: list[tuple[int, str]] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)


# What the JSON keeps of each launch's record (its rows go to "rows").
LAUNCH_FIELDS = (
    "launch",
    "group",
    "measured",
    "seconds",
    "python_threads",
    "process_threads",
    "torch_distributed",
    "notes",
)


def merge_parts(parts: list[dict], seed: int | None, order: list[tuple[int, str]]) -> Measured:
    """The launches' records (in the order they ran) as one measurement."""
    home: dict[str, str] = {}
    for part in parts:
        home.update(part["configs"])
    first = parts[0]
    return Measured(
        rows=[row for part in parts for row in part["rows"]],
        home=home,
        launches=[{k: part.get(k) for k in LAUNCH_FIELDS} for part in parts],
        skipped=list(dict.fromkeys(s for part in parts for s in part["skipped"])),
        nprocs=first["nprocs"],
        parameters=first["parameters"],
        torch_threads=first["torch_threads"],
        seed=seed,
        order=order,
        metadata=first["metadata"],
    )


def series_by_config(rows: list[dict]) -> dict[tuple[str, str], Any]:
    """(label, group) -> its selection.paired Series of img/s (launch -> rounds in order),
    the mpi group's first, then the other groups' in GROUPS order."""
    from osu_dl_bench.selection.paired import series_of

    values: dict[tuple[str, str], dict[int, list[float]]] = {}
    for row in sorted(rows, key=lambda r: (r.get("launch", 1), r["round"])):
        key = (row["config"], row.get("group", MPI_GROUP))
        values.setdefault(key, {}).setdefault(row.get("launch", 1), []).append(row["img_per_s"])
    rank = {group: i for i, group in enumerate(GROUPS)}
    keys = sorted(values, key=lambda k: rank.get(k[1], len(rank)))
    return {key: series_of(key[1], values[key]) for key in keys}


def summary_key(label: str, group: str, home: Mapping[str, str]) -> str:
    """A configuration's name in the summary: its label in its own group, 'label@group'
    where it is a reference measured in another group's launches (native@gloo)."""
    return label if home.get(label, group) == group else f"{label}@{group}"


def _ratio(series, base, *seed_parts: str) -> dict[str, float] | None:
    """img/s of ``series`` over ``base``'s, paired (selection.paired), as a dict."""
    from osu_dl_bench.selection.paired import paired_ratio

    found = paired_ratio(series, base, "train-bench", *seed_parts) if base else None
    if found is None:
        return None
    return {
        "ratio": found.ratio,
        "low": found.low,
        "high": found.high,
        "launches": found.launches,
        "rounds": found.rounds,
    }


def summarise(rows: list[dict], home: Mapping[str, str]) -> dict[str, dict]:
    """Per configuration and group: median img/s over every round of every launch, and
    its ratios against DDP-Gloo and against its group's native with their intervals."""
    series = series_by_config(rows)
    ddp = next((s for (label, _), s in series.items() if label == DDP), None)
    summary = {}
    for (label, group), mine in series.items():
        key = summary_key(label, group, home)
        summary[key] = {
            "config": label,
            "group": group,
            "median_img_per_s": statistics.median(mine.pooled().tolist()),
            "launches": len(mine.launches),
            "rounds": mine.rounds,
            "vs_ddp": _ratio(mine, ddp, key, DDP),
            "vs_native": _ratio(mine, series.get((NATIVE, group)), key, NATIVE),
        }
    return summary


def ratio_cell(ratio: Mapping[str, float] | None) -> str:
    """'1.27 (1.18-1.36)': the ratio and its 95% interval, or '-'."""
    from osu_dl_bench.selection.paired import bound_text

    if not ratio:
        return "-"
    return f"{ratio['ratio']:.2f} ({bound_text(ratio['low'])}-{bound_text(ratio['high'])})"


def best_tuned(summary: Mapping[str, dict]) -> tuple[str, dict | None]:
    """The best of the tuned rows (with and without overlap) against DDP by its estimate,
    as a line with its interval, and the row's ratio (None where no tuned row ran)."""
    from osu_dl_bench.selection.paired import bound_text

    tuned = {k: v["vs_ddp"] for k, v in summary.items() if k.startswith(TUNED) and v["vs_ddp"]}
    if not tuned:
        return "no tuned configuration measured", None
    best = max(tuned, key=lambda k: tuned[k]["ratio"])
    found = tuned[best]
    plural = "launch" if found["launches"] == 1 else "launches"
    return (
        f"{best} / {DDP} = {found['ratio']:.2f} (95% CI {bound_text(found['low'])}-"
        f"{bound_text(found['high'])}) over {found['launches']} {plural}",
        {**found, "config": best},
    )


def _threads_line(launches: list[dict]) -> str:
    """Each group's recorded thread counts, launch by launch, and where torch.distributed
    was bound."""
    by_group: dict[str, list[str]] = {}
    rank = {group: i for i, group in enumerate(GROUPS)}
    for launch in sorted(launches, key=lambda x: (rank.get(x["group"], len(rank)), x["launch"])):
        by_group.setdefault(launch["group"], []).append(str(launch.get("process_threads")))
    bound = sorted({x["group"] for x in launches if x.get("torch_distributed")})
    counts = "; ".join(f"{group} {' '.join(c)}" for group, c in by_group.items())
    return (
        f"# threads of rank 0's process after each launch's rounds: {counts}; "
        f"torch.distributed bound in: {', '.join(bound) or 'none'}"
    )


def report_table(args, cfg, measured: Measured) -> tuple[str, dict]:
    """(text, per-configuration summary) of the measurements."""
    summary = summarise(measured.rows, measured.home)
    per_group = max((v["launches"] for v in summary.values()), default=0)
    order = " ".join(f"{n}/{g}" for n, g in measured.order)
    lines = [
        f"# training throughput at p={measured.nprocs}: {cfg.model} depth {cfg.depth} width "
        f"{cfg.width} ({measured.parameters:,} parameters), {cfg.image_size}x{cfg.image_size} "
        f"synthetic images, global batch {cfg.batch_size}, torch threads "
        f"{measured.torch_threads}",
        f"# {per_group} launches per isolation group (the configurations binding Gloo in "
        f"launches of their own, native in every group), order {order} (seed {measured.seed}); "
        f"{args.rounds} rounds per launch, configurations interleaved (order rotated per "
        f"round), {args.warmup} warm-up + {args.steps} timed steps each; img/s = global batch "
        f"x steps / slowest rank's time",
        "# ratios: exp(median log-ratio of img/s) (95% CI): within a group paired round by "
        "round per launch, across groups launch k with launch k on the launch medians "
        "(cluster bootstrap, widened to Student's t over the launches)",
        _threads_line(measured.launches),
        f"{'config':<38}{'group':<8}{'img/s (median)':>16}{'vs ' + DDP:>22}{'vs native':>22}",
    ]
    for key, row in summary.items():
        lines.append(
            f"{key:<38}{row['group']:<8}{row['median_img_per_s']:>16.1f}"
            f"{ratio_cell(row['vs_ddp']):>22}{ratio_cell(row['vs_native']):>22}"
        )
    lines += [f"# {s}" for s in measured.skipped]
    lines.append(f"# best tuned configuration: {best_tuned(summary)[0]}")
    return "\n".join(lines), summary


def _write(args, measured: Measured) -> None:
    """Print the table, write OUT.txt and OUT.json."""
    cfg = _config(args)
    text, summary = report_table(args, cfg, measured)
    print(text, flush=True)
    out = Path(args.out)
    write_text_atomic(f"{out}.txt", text + "\n")
    found = best_tuned(summary)[1]
    payload = {
        "config": job_config(args),
        "parameters": measured.parameters,
        "rows": measured.rows,
        "summary": summary,
        "skipped": measured.skipped,
        "groups": measured.home,
        "launch_order": {"seed": measured.seed, "order": [f"{n}/{g}" for n, g in measured.order]},
        "launches": measured.launches,
        "best_tuned_vs_ddp": found,
        "metadata": measured.metadata,
    }
    write_atomic(
        Path(f"{out}.json"), lambda tmp: tmp.write_text(json.dumps(payload, indent=1) + "\n")
    )
    print(f"# wrote {out}.txt and {out}.json", flush=True)
