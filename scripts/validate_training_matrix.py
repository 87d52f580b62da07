"""``osu-dl-bench train --validate`` for every allreduce and bcast algorithm the trainer
accepts, at p = 2..6, overlap on and off; prints a PASS/FAIL table with the max diff.

    python scripts/validate_training_matrix.py [--nprocs 2,3,4,5,6] [--allreduce all]
        [--bcast all] [--overlap on,off] [--fp16] [--steps 20] [--json FILE] [-- TRAIN_ARGS]

Cases: each allreduce with the native bcast, and each bcast with the native allreduce,
both overlap on and off (--fp16 adds each allreduce with --fp16-compress). One mpiexec
launch per process count runs all its cases (this file under --worker calls the CLI once
per case), so torch and MPI start once per p. An algorithm the trainer refuses at some p
(e.g. a power-of-two-only bcast at p = 3) is N/A with the trainer's reason; the
hierarchical algorithms, which refuse one node, run on emulated nodes of p // 2 ranks.
Exit 1 if any case FAILs or did not run. The whole default matrix with --fp16 took
11 minutes on 2 busy cores: 209 PASS, 6 N/A (scatter_rd_allgather at p = 3, 5, 6).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The cnn (~300 KB of float64 gradients) cut into 4 buckets, so overlap has work to do.
SMALL_BUCKETS = ["--first-bucket", "4K", "--bucket-cap", "16K"]
DEFAULT_NPROCS = "2,3,4,5,6"
BATCH = 60  # divisible by every p in 2..6


# --- worker: runs under mpiexec -------------------------------------------------------------


def _names(choice: str | list[str], collective: str) -> list[str]:
    from collectives import algorithms

    return [a.name for a in algorithms(collective)] if choice == "all" else list(choice)


def _node_size(name: str, nprocs: int) -> int | None:
    """Ranks per emulated node for the hierarchical algorithms, which refuse one node."""
    return max(1, nprocs // 2) if name == "hierarchical" else None


def _case(allreduce: str, bcast: str, overlap: bool, fp16: bool, nprocs: int) -> dict:
    special = allreduce if allreduce != "native" else bcast
    return dict(
        allreduce=allreduce,
        bcast=bcast,
        overlap=overlap,
        fp16=fp16,
        ranks_per_node=_node_size(special, nprocs),
    )


def _cases(plan: dict, nprocs: int) -> list[dict]:
    """Every (allreduce, bcast, overlap, fp16) of the plan, in table order."""
    cases = []
    for name in _names(plan["allreduce"], "allreduce"):
        cases += [_case(name, "native", o, False, nprocs) for o in plan["overlap"]]
        if plan["fp16"]:
            cases.append(_case(name, "native", True, True, nprocs))
    for name in _names(plan["bcast"], "bcast"):
        if name != "native":
            cases += [_case("native", name, o, False, nprocs) for o in plan["overlap"]]
    return cases


@contextlib.contextmanager
def _emulated_nodes(ranks_per_node: int | None):
    """K-rank emulated nodes on this host for one case (read when the trainer starts)."""
    from collectives.topology import RANKS_PER_NODE_ENV

    before = os.environ.pop(RANKS_PER_NODE_ENV, None)
    if ranks_per_node:
        os.environ[RANKS_PER_NODE_ENV] = str(ranks_per_node)
    try:
        yield
    finally:
        os.environ.pop(RANKS_PER_NODE_ENV, None)
        if before is not None:
            os.environ[RANKS_PER_NODE_ENV] = before


def _argv(plan: dict, case: dict, summary: Path) -> list[str]:
    argv = ["train", "--validate", "--progress", "off", "--steps", str(plan["steps"])]
    argv += ["-b", str(plan["batch"]), *SMALL_BUCKETS]
    argv += ["--allreduce", case["allreduce"], "--bcast", case["bcast"]]
    argv += [] if case["overlap"] else ["--no-overlap"]
    argv += ["--fp16-compress"] if case["fp16"] else []
    return [*argv, *plan["train_args"], "--json", str(summary)]


def _outcome(case: dict, code: int, summary: Path, errors: str) -> dict:
    """The case's row: PASS / FAIL from the summary, N/A with the trainer's reason."""
    if code == 2:
        reason = errors.strip().splitlines()[-1] if errors.strip() else "usage error"
        reason = reason.removeprefix("osu-dl-bench: error: ")
        # Only the policy's eligibility verdict is N/A; any other usage error (a typo in
        # an algorithm's name, a bad train option) is the caller's mistake.
        return {"result": "N/A" if "cannot run here" in reason else "ERROR", "note": reason}
    if not summary.exists():
        return {"result": "ERROR", "note": f"exit {code}, no summary"}
    report = json.loads(summary.read_text())
    ran = {p["algorithm"].split(":")[0] for p in report["buckets"]}
    ran |= {p["algorithm"].split(":")[0] for p in report["bcasts"]}
    if not {case["allreduce"], case["bcast"]} <= ran:
        return {"result": "ERROR", "note": f"ran {sorted(ran)}, not the algorithms asked for"}
    v = report["validation"]
    result = "PASS" if v["passed"] and code == 0 else "FAIL"
    nodes = f"{report['nodes']} emulated nodes; " if case["ranks_per_node"] else ""
    return {
        "result": result,
        "diff": v["max_abs_diff"],
        "tolerance": v["tolerance"],
        "note": f"{nodes}rank {v['rank']} {v['parameter']}",
    }


def _run_case(plan: dict, case: dict, scratch: Path, rank: int) -> dict:
    from osu_dl_bench.cli import main

    summary = scratch / "summary.json"
    summary.unlink(missing_ok=True)
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    # Rank 0 alone prints; the table holds what matters, the rest would drown it.
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        _emulated_nodes(case["ranks_per_node"]),
    ):
        code = main(_argv(plan, case, summary))
    row = {**case, "code": code, "seconds": time.perf_counter() - start}
    return {**row, **_outcome(case, code, summary, err.getvalue())} if rank == 0 else row


def worker(comm, plan_path: str, out_dir: str) -> int:
    """Run the plan's cases at this job's p; rank 0 rewrites results.jsonl after each case."""
    from osu_dl_bench.paths import write_text_atomic

    plan, out = json.loads(Path(plan_path).read_text()), Path(out_dir)
    cases = _cases(plan, comm.Get_size())
    rank = comm.Get_rank()
    if rank == 0:
        write_text_atomic(out / "cases.json", json.dumps(cases))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for case in cases:
            row = _run_case(plan, case, Path(scratch), rank)
            if rank == 0:
                rows.append(json.dumps(row) + "\n")
                write_text_atomic(out / "results.jsonl", "".join(rows))
    return 0


# --- orchestrator ---------------------------------------------------------------------------


def _env(nprocs: int) -> dict[str, str]:
    """The job's environment (oversubscribed ranks that busy-poll starve each other)."""
    from osu_dl_bench.jobs.launch import mpi_environment

    env = mpi_environment(nprocs)
    # The trainer asks MPI for thread level serialized itself; an override would break it.
    env.pop("MPI4PY_RC_THREAD_LEVEL", None)
    return env


def _launch(nprocs: int, plan_path: Path, out: Path, timeout: float) -> str:
    """One mpiexec job running every case at ``nprocs``; '' or why it ended badly."""
    from osu_dl_bench.jobs import launch
    from osu_dl_bench.paths import write_text_atomic

    cmd = launch.mpi_command(nprocs, [__file__, "--worker", str(plan_path), str(out)])
    try:
        job = launch.run(cmd, timeout, env=_env(nprocs), cwd=REPO, stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    write_text_atomic(out / "job.log", job.stdout)
    return "" if job.returncode == 0 else f"job exit {job.returncode} (see {out}/job.log)"


def _rows(nprocs: int, out: Path, problem: str) -> list[dict]:
    """The job's rows, with the cases it never reached marked as not run."""
    done = []
    if (out / "results.jsonl").exists():
        done = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    planned = json.loads((out / "cases.json").read_text()) if (out / "cases.json").exists() else []
    missing = [{**c, "result": "NOT RUN", "note": problem or "?"} for c in planned[len(done) :]]
    if not planned:
        missing = [
            {
                "allreduce": "-",
                "bcast": "-",
                "overlap": True,
                "fp16": False,
                "result": "NOT RUN",
                "note": problem or "no cases written",
            }
        ]
    return [{**row, "p": nprocs} for row in done + missing]


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def table(rows: list[dict]) -> list[str]:
    """The PASS/FAIL table, one line per case, and a count per result."""
    lines = [
        f"{'p':>2}  {'allreduce':<20}{'bcast':<24}{'overlap':<8}{'fp16':<5}"
        f"{'result':<8}{'max_diff':>10}{'tolerance':>11}  where / why"
    ]
    for r in rows:
        lines.append(
            f"{r['p']:>2}  {r['allreduce']:<20}{r['bcast']:<24}{'on' if r['overlap'] else 'off':<8}"
            f"{'on' if r['fp16'] else 'off':<5}{r['result']:<8}{_fmt(r.get('diff')):>10}"
            f"{_fmt(r.get('tolerance')):>11}  {r.get('note', '')}"
        )
    counts = {
        k: sum(r["result"] == k for r in rows) for k in ("PASS", "FAIL", "N/A", "ERROR", "NOT RUN")
    }
    lines.append("# " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return lines


def _parse_nprocs(text: str) -> list[int] | None:
    """[2, 3] of '2,3'; None unless every value is a count >= 1."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        return None
    return values if values and min(values) >= 1 else None


def main(argv: list[str]) -> int:
    """Launch one job per p, collect the rows, print (and write) the table."""
    if argv[:1] == ["--worker"]:
        from osu_dl_bench.jobs.entry import run_in_job
        from osu_dl_bench.train.config import THREAD_LEVEL

        return run_in_job(lambda comm: worker(comm, *argv[1:3]), THREAD_LEVEL)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nprocs", default=DEFAULT_NPROCS, help=f"({DEFAULT_NPROCS})")
    parser.add_argument("--allreduce", default="all", help="'all' or a comma-separated list")
    parser.add_argument("--bcast", default="all", help="'all' or a comma-separated list")
    parser.add_argument("--overlap", default="on,off", help="on, off or on,off (on,off)")
    parser.add_argument("--fp16", action="store_true", help="add --fp16-compress rows")
    parser.add_argument(
        "--steps", type=int, default=20, help="steps, all compared (20: train's default)"
    )
    parser.add_argument("--batch", type=int, default=BATCH, help=f"global batch ({BATCH})")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per p (900)")
    parser.add_argument("--json", default=None, help="also write the rows")
    # Absolute when parsed: the jobs run in the repository's directory, where a relative
    # path would name another folder (their rows landed in the checkout).
    parser.add_argument(
        "--run-dir",
        default=None,
        type=lambda text: str(Path(text).absolute()),
        help="keep each p's rows in this run directory (resumable)",
    )
    parser.add_argument("--resume", action="store_true", help="continue --run-dir")
    parser.add_argument("train_args", nargs="*", help="after --: more train options")
    args = parser.parse_args(argv)
    if args.resume and not args.run_dir:
        parser.error("--resume continues a kept run directory: give --run-dir")
    lists = {
        k: v if v == "all" else v.split(",")
        for k, v in (("allreduce", args.allreduce), ("bcast", args.bcast))
    }
    if not set(args.overlap.split(",")) <= {"on", "off"}:
        parser.error(f"--overlap {args.overlap!r}: expected on, off or on,off")
    overlap = [o == "on" for o in dict.fromkeys(args.overlap.split(","))]
    plan = {
        **lists,
        "overlap": overlap,
        "fp16": args.fp16,
        "steps": args.steps,
        "batch": args.batch,
        "train_args": args.train_args,
    }
    counts = _parse_nprocs(args.nprocs)
    if counts is None or args.steps < 1 or args.batch < 1:
        parser.error("--nprocs takes counts >= 1 (2,3,4); --steps and --batch are >= 1")
    found = _run_matrix(args, plan, counts)
    if found is None:
        return 2
    rows = [row for record in found.records for row in record["rows"]]
    print("\n".join(table(rows)), flush=True)
    if args.json:
        from osu_dl_bench.paths import write_text_atomic

        write_text_atomic(args.json, json.dumps(rows, indent=1))
    failed = found.code != 0 or any(r["result"] in ("FAIL", "ERROR", "NOT RUN") for r in rows)
    return 1 if failed else 0


def _run_matrix(args: argparse.Namespace, plan: dict, counts: list[int]):
    """One job per p through the experiment engine, each p's rows kept in the run directory
    (a resumed run skips every p whose cases all ran); the engine's result, or None after
    a usage error (said)."""
    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.jobs.experiment import RecordedExperiment, Turn, run_recorded
    from osu_dl_bench.jobs.orchestrate import JobOutcome
    from osu_dl_bench.paths import write_text_atomic

    with tempfile.TemporaryDirectory() as tmp:
        write_text_atomic(Path(tmp) / "plan.json", json.dumps(plan))

        def run(turn: Turn) -> JobOutcome:
            nprocs = turn.job[0]
            out = Path(run_dir) / f"p{nprocs}"  # the job's log stays beside its rows
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            start = time.perf_counter()
            problem = _launch(nprocs, Path(tmp) / "plan.json", out, args.timeout)
            record = {"nprocs": nprocs, "rows": _rows(nprocs, out, problem)}
            write_text_atomic(turn.part, json.dumps(record | {"complete": not problem}))
            print(f"# p={nprocs}: {time.perf_counter() - start:.0f} s {problem}", flush=True)
            return JobOutcome(1 if problem else 0, finished=True, failures=0)

        run_dir = args.run_dir or str(Path(tmp) / "run")
        distinct = tuple(dict.fromkeys(counts))  # each p once
        spec = RecordedExperiment(
            "validate_training_matrix", plan, run_dir, "--run-dir", distinct, 1, ("mpi",),
            resume=args.resume, shuffle=False,
        )  # fmt: skip
        try:
            return run_recorded(spec, run)
        except UsageError as exc:
            print(f"validate_training_matrix: error: {exc}", file=sys.stderr)
            return None


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
