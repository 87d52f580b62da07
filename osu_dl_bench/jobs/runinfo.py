"""The run directory's metadata.json: what the sweep was asked (written by whoever starts
the sweep) and what each job found (MPI library, hosts, nodes, ppn; written by the job's
rank 0). Jobs run one after the other, so read-modify-write is safe. No MPI here.
"""

from __future__ import annotations

import os
from typing import Any

from osu_dl_bench import __version__
from osu_dl_bench.jobs.sweep_config import SweepConfig
from osu_dl_bench.measurement.store import RunStore, launch_entries
from osu_dl_bench.runtime.metadata import COMMAND_KEY, command_line, utc_now
from osu_dl_bench.runtime.slurm_env import slurm_job

# The array library behind each buffer kind (-d).
ARRAY_MODULES = {"cpu": "numpy", "cpu-registered": "numpy (registered memory)", "cuda": "cupy"}
# What a job on GPU buffers records of its GPU (collectives.device.gpu_facts), kept
# run-wide like the library's fields; a run on the host has none of them.
GPU_FIELDS = (
    "gpu_model",
    "gpu_driver",
    "cuda_runtime",
    "nccl_version",
    "mpi_cuda",
    "mpi_cuda_source",
)
_SLURM_VARS = {
    "slurm_job_id": "SLURM_JOB_ID",
    "slurm_nodes": "SLURM_JOB_NUM_NODES",
    "slurm_tasks_per_node": "SLURM_TASKS_PER_NODE",
    "slurm_step_id": "SLURM_STEP_ID",
}


def slurm_fields() -> dict[str, Any]:
    """The Slurm job's id and shape, when running under Slurm."""
    fields: dict[str, Any] = {
        key: os.environ[var] for key, var in _SLURM_VARS.items() if os.environ.get(var)
    }
    job = slurm_job()
    if job is not None:
        fields.update(slurm_ntasks=job.ntasks, slurm_ntasks_per_node=job.ntasks_per_node)
    return fields


def session_fields(cfg: SweepConfig, launcher: str) -> dict[str, Any]:
    """What this invocation asked for."""
    m = cfg.measure
    return {
        "package_version": __version__,
        COMMAND_KEY: command_line(),
        "date": utc_now(),
        "launcher": launcher,
        "buffer_kind": m.device,
        "array_module": ARRAY_MODULES.get(m.device, m.device),
        "dtype": m.dtype,
        "op": m.op,
        "collectives": list(m.collectives),
        "nprocs": list(cfg.nprocs),
        "min_size": m.min_size,
        "max_size": m.max_size,
        "algorithms": m.algorithms,
        "budget_s": cfg.budget,
        "ranks_per_node": m.emulated_ppn,
        "thread_level": m.thread_level,
        # sweep --spread: the launches started evenly over at least this many minutes.
        "spread_minutes": cfg.spread_minutes,
        **slurm_fields(),
    }


def record_session(store: RunStore, session: dict[str, Any]) -> None:
    """Start (or, with --resume, continue) the metadata with this invocation's fields
    (``session_fields`` of a sweep; an experiment's own, with command, date, launcher)."""
    metadata = store.read_metadata()
    history = metadata.get("sessions", [])
    history.append({k: session[k] for k in (COMMAND_KEY, "date", "launcher")})
    metadata.update(session, sessions=history, complete=False)
    metadata.setdefault("jobs", {})
    store.write_metadata(metadata)


def record_launch_order(store: RunStore, seed: int, order: list[str]) -> None:
    """Note the order the session's launches run in ('pP LAUNCH/GROUP') and the seed that
    shuffled it (a resumed session appends its own)."""
    metadata = store.read_metadata()
    metadata.setdefault("launch_orders", []).append({"seed": seed, "order": order})
    store.write_metadata(metadata)


def record_submission(store: RunStore, job_id: str, script: str) -> None:
    """Note a batch job submitted to run this sweep (before it starts, or between resumes)."""
    metadata = store.read_metadata()
    submissions = metadata.setdefault("submissions", [])
    submissions.append(
        {"slurm_job_id": job_id, "script": script, COMMAND_KEY: command_line(), "date": utc_now()}
    )
    store.write_metadata(metadata)


def record_job(store: RunStore, nprocs: int, job: dict[str, Any], launch: str = "1/mpi") -> None:
    """Store one launch's entry once, under jobs[nprocs]["launches"][launch] ('LAUNCH/GROUP'),
    and refresh the run-wide fields (library and version of the latest job, all hosts, the
    largest nodes and ppn)."""
    metadata = store.read_metadata()
    jobs = metadata.setdefault("jobs", {})
    launches = jobs.get(str(nprocs), {}).get("launches", {})
    earlier = launches.get(launch, {})
    previous = earlier.pop("previous", [])
    if earlier and earlier.get("started") != job.get("started"):
        # A resumed launch keeps what the earlier sessions ran on.
        previous.append(earlier)
    launches[launch] = {**job, "previous": previous} if previous else job
    jobs[str(nprocs)] = {"launches": launches}
    entries = [entry for count in jobs.values() for entry in launch_entries(count)]
    # A launch record of an experiment may lack the library's fields (a job that ended
    # before it could say): the run keeps what an earlier job said.
    library = ("mpi_library", "mpi_version", "mpi4py_version", *GPU_FIELDS)
    metadata.update({name: job[name] for name in library if name in job})
    metadata.update(
        hosts=sorted({h for e in entries for h in e.get("hosts", [])}),
        nodes=max(e.get("nodes", 0) for e in entries),
        ppn=max(e.get("ppn", 0) for e in entries),
    )
    store.write_metadata(metadata)


def record_stall(store: RunStore, stall: dict[str, Any]) -> None:
    """Note a job stopped for reporting nothing, with what its ranks' heartbeats said."""
    metadata = store.read_metadata()
    metadata.setdefault("stalls", []).append(stall)
    store.write_metadata(metadata)


def record_completion(store: RunStore, complete: bool, **fields: Any) -> None:
    """Mark the sweep finished (every planned point stored) or not, with a date."""
    metadata = store.read_metadata()
    metadata.update(complete=complete, finished=utc_now(), **fields)
    store.write_metadata(metadata)


def finish_run(store: RunStore, complete: bool) -> list[str]:
    """Write Parquet (when pyarrow is present) and the completion mark; the lines that
    tell the user where the results are."""
    parquet = store.write_parquet()
    record_completion(store, complete, parquet=parquet is not None)
    rows = len(store.read()[0])  # dropped rows were reported when the sweep began
    lines = [f"# {rows} results in {store.results_path}"]
    if parquet is not None:
        lines.append(f"# also {parquet}")
    else:
        lines.append("# results.parquet not written: pyarrow is not installed")
    return lines
