"""Careless and hostile inputs, each run as a user would, with a hard timeout: prints one
table row per case (exit code, the first error line, whether any rank hung).

    python scripts/hostile_inputs.py [--timeout 120] [--only SUBSTRING]

Every case must end non-zero (or as stated) within the timeout with one message; the
script exits 1 if any case hangs or gives an unexpected exit code. Deeper checks (canary
bytes around buffers, resume after a full disk, refused pickles) live in the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from osu_dl_bench.jobs import launch
from osu_dl_bench.runtime import OVERSUBSCRIBED_CVARS

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "osu_dl_bench.cli"]
MPIEXEC = launch.find_mpiexec()
TABLE = REPO / "tuning_tables" / "reference-cpu-mpich-1node.json"
BENCH = ["bench", "allreduce", "-i", "5", "-x", "1"]
SELECT = [*CLI, "select", "--np", "2", "--size", "8", "--table"]
TRAIN2 = [MPIEXEC, "-n", "2", *CLI, "train", "--steps", "2", "-b", "8"]


@dataclass(frozen=True)
class Case:
    """One input: what it is, the command (run in ``cwd``), and the exit code expected."""

    what: str
    argv: list[str]
    expect: int = 2


def _mpmd(*parts: tuple[int, list[str], str | None]) -> list[str]:
    """mpiexec -n A [-wdir D] CMD : -n B ... (each part its own command and directory)."""
    cmd = [MPIEXEC]
    for i, (nprocs, args, workdir) in enumerate(parts):
        cmd += ([":"] if i else []) + ["-n", str(nprocs)]
        cmd += (["-wdir", workdir] if workdir else []) + [*CLI, *args]
    return cmd


def _files(tmp: Path) -> dict[str, Path]:
    """The hostile files the cases read."""
    table = json.loads(TABLE.read_text())
    made = {"a": tmp / "a", "b": tmp / "b", "empty": tmp / "empty"}
    for name in ("a", "b", "empty"):
        made[name].mkdir()
    for name in ("a", "b"):
        (made[name] / "t.json").write_text(json.dumps({**table, "name": f"node {name}"}))
    made["nan"] = tmp / "nan.json"
    made["nan"].write_text(TABLE.read_text().replace('"min_bytes": 0', '"min_bytes": NaN', 1))
    made["deep"] = tmp / "deep.json"
    made["deep"].write_text("[" * 100_000 + "]" * 100_000)
    made["chunk"] = tmp / "chunk.json"
    made["chunk"].write_text(json.dumps(table).replace('"chunk": 2097152', '"chunk": 1', 1))
    made["fifo"] = tmp / "fifo.json"
    os.mkfifo(made["fifo"])
    return made


def _cases(f: dict[str, Path]) -> list[Case]:
    tuned = [*BENCH, "-a", "tuned", "--table", "t.json", "-m", "8:64"]
    cma = [*BENCH, "-a", "cma"]
    return [
        Case(
            "--table readable on rank 0 only",
            _mpmd((1, tuned, str(f["a"])), (2, tuned, str(f["empty"]))),
        ),
        Case(
            "--table differing between ranks",
            _mpmd((1, tuned, str(f["a"])), (1, tuned, str(f["b"]))),
        ),
        Case("-i abc on one MPMD part", _mpmd((2, BENCH, None), (1, [*BENCH, "-i", "abc"], None))),
        Case(
            "-m 1:16 vs 1:8 (cma)",
            _mpmd((1, [*cma, "-m", "1:16"], None), (1, [*cma, "-m", "1:8"], None)),
        ),
        Case("bench on one rank, list on the other", _mpmd((1, BENCH, None), (1, ["list"], None))),
        Case(
            "OSU_DL_BENCH_RANKS_PER_NODE on one rank",
            [MPIEXEC, "-n", "1", "-env", "OSU_DL_BENCH_RANKS_PER_NODE", "1", *CLI, *BENCH]
            + [":", "-n", "1", *CLI, *BENCH],
        ),
        Case(
            "cma/shm calls with mismatched counts (driver, p=3)",
            [MPIEXEC, "-n", "3", sys.executable, str(REPO / "tests/drivers/mismatched_counts.py")],
            expect=0,
        ),
        Case(
            "table with NaN", [*CLI, "select", "--np", "2", "--size", "8", "--table", str(f["nan"])]
        ),
        Case(
            "table nested 100000 deep",
            [*CLI, "select", "--np", "2", "--size", "8", "--table", str(f["deep"])],
        ),
        Case(
            "table with cma chunk=1",
            [*CLI, "select", "--np", "2", "--size", "8", "--table", str(f["chunk"])],
        ),
        Case(
            "a FIFO as --table",
            [*CLI, "select", "--np", "2", "--size", "8", "--table", str(f["fifo"])],
        ),
        Case("-i 100000000000", [*CLI, "bench", "allreduce", "-i", "100000000000"]),
        Case("-a ring:seg=abc", [*CLI, *BENCH, "-a", "ring:seg=abc"]),
        Case("-m 0:0", [*CLI, *BENCH, "-m", "0:0"]),
        Case("-m 1:1024G", [*CLI, *BENCH, "-m", "1:1024G"]),
        Case("-o /proc/x.csv", [MPIEXEC, "-n", "2", *CLI, *BENCH, "-o", "/proc/x.csv"]),
        Case("-o with a terminal escape", [*CLI, *BENCH, "-o", "/nonexist\x1b[2J/x.csv"]),
        Case(
            "sweep --submit --sbatch-args with a newline",
            [*CLI, "sweep", "--submit", "--dry-run", "--sbatch-args", "x\ntouch PWNED", "-o", "r"],
        ),
        Case("train --lr 1e308", [*CLI, "train", "--lr", "1e308"]),
        Case("train --seed -1", [*CLI, "train", "--seed", "-1"]),
        Case(
            "train --json /proc/x.json",
            [
                MPIEXEC,
                "-n",
                "2",
                *CLI,
                "train",
                "--steps",
                "2",
                "-b",
                "8",
                "--json",
                "/proc/x.json",
            ],
        ),
        Case(
            "train --validate with one wrong allreduce element",
            ["env", "OSU_DL_BENCH_TRAIN_WRONG_ALLREDUCE=1:0"]
            + [MPIEXEC, "-n", "2", *CLI, "train", "--validate", "--steps", "20", "-b", "32"],
            expect=1,
        ),
    ]


def _run(case: Case, timeout: float, cwd: Path) -> tuple[int | None, str]:
    """(exit code or None if it hung, the first error line)."""
    # Up to 3 ranks on this host's cores: MPICH's busy-polling collectives off.
    env = launch.mpi_environment(extra=OVERSUBSCRIBED_CVARS)
    try:
        done = launch.run(case.argv, timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        return None, ""
    out, err = done.stdout, done.stderr
    lines = [ln for ln in (err + out).splitlines() if "error" in ln.lower() or "FAIL" in ln]
    summary = [ln for ln in out.splitlines() if ln.startswith("SUMMARY")]
    return done.returncode, (summary or lines or [""])[0][:150]


def main() -> int:
    """Run the cases and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--only", default="", help="cases whose description holds this")
    args = parser.parse_args()
    bad = 0
    print("| input | exit | expected | hung | message |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        files = _files(Path(tmp))
        for case in (c for c in _cases(files) if args.only in c.what):
            code, message = _run(case, args.timeout, Path(tmp))
            bad += code != case.expect
            shown = message.replace("|", "\\|").encode("unicode_escape").decode()
            hung = "yes" if code is None else "no"
            print(f"| {case.what} | {code} | {case.expect} | {hung} | {shown} |", flush=True)
        bad += (Path(tmp) / "PWNED").exists()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
