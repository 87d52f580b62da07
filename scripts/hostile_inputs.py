"""Careless and hostile inputs, each run as a user would, with a hard timeout: prints one
table row per case (exit code, the first error line, whether any rank hung).

    python scripts/hostile_inputs.py [--timeout 120] [--only SUBSTRING]

Every case must end non-zero (or as stated) within the timeout with one message; the
script exits 1 if any case hangs or gives an unexpected exit code. Deeper checks (canary
bytes around buffers, resume after a full disk, refused pickles) live in the test suite.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from osu_dl_bench.jobs import launch
from osu_dl_bench.measurement.bench_config import host_memory_bytes
from osu_dl_bench.runtime.launcher import OVERSUBSCRIBED_CVARS

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "osu_dl_bench.cli"]
MPIEXEC = launch.find_mpiexec()
TABLE = REPO / "tuning_tables" / "reference-cpu-mpich-1node.json"
BENCH = ["bench", "allreduce", "-i", "5", "-x", "1"]
SELECT = [*CLI, "select", "--np", "2", "--size", "8", "--table"]
TRAIN2 = [MPIEXEC, "-n", "2", *CLI, "train", "--steps", "2", "-b", "8"]
# A small sweep at p = 2, the start of the sweep cases' commands.
SWEEP = [*CLI, "sweep", "--np", "2", "-a", "native,ring", "-m", "8:64"]


@dataclass(frozen=True)
class Case:
    """One input: what it is, the command (run in ``cwd``), the exit code expected, and
    the run directory (a name in the files) whose results must survive it."""

    what: str
    argv: list[str]
    expect: int = 2
    keeps: str | None = None
    # The run may gain rows (a --resume), never lose or change one.
    grows: bool = False


# Each rank (or the one process) writes its exit code to $EXITS/RANK, so the table shows
# every rank's, not only the launcher's.
RECORD_EXIT = (
    '"$@"; code=$?; echo $code > "$EXITS/${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}"; exit $code'
)


def _recording(argv: list[str]) -> list[str]:
    """``argv`` with each Python process wrapped to record its exit code."""
    out: list[str] = []
    for word in argv:
        out += ["sh", "-c", RECORD_EXIT, "sh", word] if word == sys.executable else [word]
    return out


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


def _runs(tmp: Path) -> dict[str, Path]:
    """A small real sweep, and copies of it spoilt as a careless user would."""
    run = tmp / "run"
    argv = [*CLI, "sweep", "--np", "2", "-a", "native,ring", "-m", "8:64", "--budget", "0.05"]
    env = launch.mpi_environment(extra=OVERSUBSCRIBED_CVARS)
    launch.run([*argv, "--launches", "2", "-o", str(run)], 300, env=env, cwd=tmp).check_returncode()
    made = {"run": run}
    for name in ("listmeta", "bom", "negative", "openmpi", "readonly"):
        made[name] = tmp / name
        shutil.copytree(run, made[name])
    (made["listmeta"] / "metadata.json").write_text("[1, 2]")
    results = made["bom"] / "results.csv"
    results.write_bytes(b"\xef\xbb\xbf" + results.read_bytes())
    _negative_sizes(made["negative"] / "results.csv")
    meta = json.loads((made["openmpi"] / "metadata.json").read_text())
    meta["mpi_library"] = "Open MPI v5.0.8"
    (made["openmpi"] / "metadata.json").write_text(json.dumps(meta))
    made["loop"] = tmp / "loop"
    made["loop"].symlink_to(tmp / "loop2")
    (tmp / "loop2").symlink_to(made["loop"])
    entry = json.loads(TABLE.read_text())
    entry["entries"][0].update(nodes=3, ppn=5, nprocs=2)
    made["layout"] = tmp / "layout.json"
    made["layout"].write_text(json.dumps(entry))
    return made


def _negative_sizes(path: Path) -> None:
    """Every row of 8 bytes as -8 bytes: rows no measurement can give."""
    lines = path.read_text().splitlines()
    column = lines[0].split(",").index("size_bytes")
    for i, line in enumerate(lines[1:], start=1):
        cells = line.split(",")
        if cells[column] == "8":
            cells[column] = "-8"
            lines[i] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


def _output_cases(f: dict[str, Path]) -> list[Case]:
    """Careless input, third round: output paths, memory, metadata, layouts, libraries."""
    long_name = str(f["run"].parent / ("e" * 300))
    looped = str(f["loop"] / "x")
    run, big = str(f["run"]), str(1 << (host_memory_bytes().bit_length() - 1))
    in_read_only = " && ".join(
        [
            f"mount --bind {shlex.quote(str(f['readonly']))} {shlex.quote(str(f['readonly']))}",
            f"mount -o remount,bind,ro {shlex.quote(str(f['readonly']))}",
            shlex.join([*CLI, "plot", str(f["readonly"])]),
        ]
    )
    table = str(f["run"].parent / "negative.json")
    tune_then_select = " && ".join(
        [
            shlex.join([*CLI, "tune", str(f["negative"]), "-o", table]),
            shlex.join([*CLI, "select", "--np", "2", "--size", "8", "--table", table]),
        ]
    )
    damaged = str(f["run"].parent / "damaged-period")
    damaged_period = " && ".join(
        [
            shlex.join(["cp", "-r", str(f["run"]), damaged]),
            f"printf '{{' > {shlex.quote(damaged)}/period.json",
            shlex.join([*CLI, "tune", damaged, "-o", "period.json"]),
        ]
    )
    mpi2, mpi3 = [MPIEXEC, "-n", "2", *CLI], [MPIEXEC, "-n", "3", *CLI]
    return [
        *_period_cases(f),
        Case("bench -o with a 300-character name (p=3)", [*mpi3, *BENCH, "-o", f"{long_name}.csv"]),
        Case(f"bench -m {big} on this node (p=2)", [*mpi2, *BENCH, "-m", f"{big}:{big}"]),
        Case(f"sweep -m {big}", [*CLI, "sweep", "--np", "2", "-m", f"{big}:{big}", "-o", "big"]),
        Case("tune -o with a 300-character name", [*CLI, "tune", run, "-o", f"{long_name}.json"]),
        Case("sweep -o through a symlink loop", [*CLI, "sweep", "--np", "2", "-o", looped]),
        Case("plot -o through a symlink loop", [*CLI, "plot", run, "-o", looped], keeps="run"),
        Case("merge -o through a symlink loop", [*CLI, "merge", run, str(f["bom"]), "-o", looped]),
        Case("compare --out through a symlink loop", [*CLI, "compare", run, run, "--out", looped]),
        Case(
            "train --save-params through a symlink loop (p=2)", [*TRAIN2, "--save-params", looped]
        ),
        Case("train --json with a 300-character name (p=2)", [*TRAIN2, "--json", long_name]),
        Case(
            "plot on a run directory on a read-only mount",
            ["unshare", "-m", "sh", "-c", in_read_only],
            keeps="readonly",
        ),
        Case(
            "tune on metadata.json holding [1, 2]",
            [*CLI, "tune", str(f["listmeta"]), "-o", "t.json"],
        ),
        Case(
            "plot on metadata.json holding [1, 2]",
            [*CLI, "plot", str(f["listmeta"])],
            keeps="listmeta",
        ),
        Case(
            "sweep --resume on metadata.json holding [1, 2]",
            [
                *SWEEP,
                "--resume",
                "-o",
                str(f["listmeta"]),
            ],
            keeps="listmeta",
        ),
        Case(
            "tune on rows of size -8, then select on its table", ["sh", "-c", tune_then_select], 0
        ),
        Case(
            "tune on a run whose period.json is damaged",
            ["sh", "-c", damaged_period],
        ),
        *[
            Case(
                f"OSU_DL_BENCH_RANKS_PER_NODE={value} (p=3)",
                ["env", f"OSU_DL_BENCH_RANKS_PER_NODE={value}", *mpi3, *BENCH, "-m", "8:8"],
            )
            for value in ("abc", "0", "-1")
        ],
        Case(
            "select --np 4 --nodes 5", [*CLI, "select", "--np", "4", "--nodes", "5", "--size", "8"]
        ),
        Case("select --np 2 --ppn 5", [*CLI, "select", "--np", "2", "--ppn", "5", "--size", "8"]),
        Case("select --ppn 0", [*CLI, "select", "--np", "2", "--ppn", "0", "--size", "8"]),
        Case("select --size ,,,", [*CLI, "select", "--np", "2", "--size", ",,,"]),
        Case("table entry nodes 3, ppn 5, p 2", [*SELECT, str(f["layout"])]),
        Case(
            "merge an MPICH run with an Open MPI run",
            [*CLI, "merge", run, str(f["openmpi"]), "-o", "mixed"],
        ),
        Case(
            "tune on a results.csv with a byte-order mark",
            [*CLI, "tune", str(f["bom"]), "-o", "b.json"],
            0,
        ),
        Case(
            "sweep with MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=bogus",
            [
                "env",
                "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=bogus",
                *CLI,
                "sweep",
                "--np",
                "2",
                "-m",
                "8:8",
                "-o",
                "cvar",
            ],
            15,
        ),
        # run directories, verify-export, triage, compare, adaptive, exports
        *_run_directory_cases(f),
    ]


def _copy_run(f: dict[str, Path], name: str) -> Path:
    """A copy of the real sweep under ``name``, registered in ``f``."""
    f[name] = f["run"].parent / name
    shutil.copytree(f["run"], f[name])
    return f[name]


def _every_row_a_training_step(path: Path) -> None:
    """The rows as train-bench stores its training steps: collective 'train_step'."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows({**row, "collective": "train_step"} for row in rows)


def _bench_file(path: Path, lag: float, node: str = "h") -> Path:
    """A bench --per-rank -o JSON file whose rank 1 lags by ``lag`` at four sizes."""
    per_rank = [
        {"rank": r, "node": node, "lag_us": lag if r else 0.0, "wait_us": 0.0, "finish_us": 1.0}
        for r in range(2)
    ]
    records = [
        {"collective": "bcast", "algorithm": "native", "size_bytes": size, "p50_us": 5.0}
        | {"per_rank": per_rank}
        for size in (8, 16, 32, 64)
    ]
    path.write_text(json.dumps(records))  # Python's json writes inf and nan as it reads them
    return path


def _linkmap_file(path: Path) -> Path:
    """A record as bench linkmap -o writes it, of three nodes measured five times."""
    from osu_dl_bench.diagnosis.linkmap import judge_links, linkmap_record, write_linkmap
    from osu_dl_bench.measurement.linkmap import LinkSamples, LinkSettings

    pairs = [(0, 1), (0, 2), (1, 2)]
    latency = {pair: (20.0, 21.0, 19.5, 20.2, 20.1) for pair in pairs}
    bandwidth = {(a, b): (120.0, 118.0, 121.0, 119.0, 120.5) for a in range(3) for b in range(3)}
    bandwidth = {pair: values for pair, values in bandwidth.items() if pair[0] != pair[1]}
    samples = LinkSamples(
        ("n1", "n2", "n3"), (0, 1, 2), LinkSettings(1 << 20, 4, 1, 5), latency, bandwidth
    )
    write_linkmap(str(path), linkmap_record(judge_links(samples), {}))
    return path


def _client_dir(path: Path, body: str) -> Path:
    """A directory standing in for OMB's: osu_allreduce and osu_bcast run ``body``."""
    path.mkdir()
    for name in ("osu_allreduce", "osu_bcast"):
        (path / name).write_text(f"#!/bin/sh\n{body}\n")
        (path / name).chmod(0o755)
    return path


def _period_cases(f: dict[str, Path]) -> list[Case]:
    """Careless input, fifth round: period.json a FIFO, absurd or a symlink; a run compared
    with itself; a spread no clock holds."""
    tmp, run = f["run"].parent, str(f["run"])

    def on_copy(name: str, plant: str, *argv: str) -> list[str]:
        copy = str(tmp / name)
        command = shlex.join(a.replace("{run}", copy) for a in argv)
        steps = [shlex.join(["cp", "-r", run, copy]), plant.format(run=shlex.quote(copy))]
        return ["sh", "-c", " && ".join([*steps, command])]

    huge = 'printf \'{{"sd": 1e308, "df": 4, "pairs": 28, "source": "x"}}\' '
    victim = shlex.quote(str(tmp / "victim"))
    return [
        Case(
            "tune on a run whose period.json is a FIFO",
            on_copy("fifo-period", "mkfifo {run}/period.json", *CLI, "tune", "{run}", "-o", "t"),
        ),
        Case(
            "tune on a run whose period.json holds sd 1e308",
            on_copy("huge-period", huge + "> {run}/period.json", *CLI, "tune", "{run}", "-o", "t"),
        ),
        Case(
            "compare A B where B/period.json is a symlink to another file",
            on_copy(
                "linked-period",
                f"echo kept > {victim} && ln -s {victim} {{run}}/period.json",
                *CLI,
                "compare",
                str(f["bom"]),
                "{run}",
            ),
        ),
        Case(
            "compare A A (RUN_B a symlink to RUN_A)",
            on_copy("same-run", "ln -s {run} {run}-link", *CLI, "compare", "{run}", "{run}-link"),
        ),
        Case("sweep --spread 1e9 (minutes)", [*SWEEP, "--spread", "1e9", "-o", "spread"]),
    ]


def _run_directory_cases(f: dict[str, Path]) -> list[Case]:
    """Careless input, fourth round: outputs aimed into run directories, triage's inputs,
    compare's table, adaptive sweeps, verify-export's clients and exported files."""
    tmp, run = f["run"].parent, f["run"]
    other_table = json.loads(TABLE.read_text())
    for number, entry in enumerate(other_table["entries"], start=1):
        entry.update(nprocs=64 * number, ppn=64 * number, nodes=1)  # none at p=2
    (tmp / "p64.json").write_text(json.dumps(other_table))
    trained = _copy_run(f, "trained")
    _every_row_a_training_step(trained / "results.csv")
    focused = _copy_run(f, "focused")
    # Launch 3 of the run measures ring at 8 bytes (its label as the sweep stores it).
    focus = {"launches": {"3": {"points": [[2, "allreduce", 8, "ring:seg=0"]], "reasons": ["x"]}}}
    (focused / "focus.json").write_text(json.dumps(focus))
    focus_file = shlex.quote(str(focused / "focus.json"))
    shutil.copy(focused / "focus.json", focused / "focus.json.before")
    resumed = shlex.join(
        [*CLI, "sweep", "--np", "2", "-a", "native,ring", "-m", "8:64", "--launches", "2"]
        + ["--adaptive", "3", "--budget", "0.1", "--resume", "-o", str(focused)]
    )
    overflow = _copy_run(f, "overflow")
    (overflow / "focus.json").write_text(
        json.dumps(focus).replace('"allreduce", 8', '"allreduce", 1e400')
    )
    half = _copy_run(f, "half.verify")
    (tmp / "zero.json").symlink_to("/dev/zero")
    (tmp / "existing.csv").write_text("measured\n")
    exports = {
        "t.openmpi.rules": (TABLE.parent / "reference-cpu-mpich-1node.openmpi.rules").read_text(),
        "unknown.mpich.json": json.dumps(
            {
                "collective=bcast": {
                    "comm_type=intra": {
                        "comm_size<=4": {
                            "avg_msg_size=any": {"algorithm=MPIR_Bcast_intra_bogus": {}}
                        }
                    }
                }
            }
        ),  # fmt: skip
        "string.mpich.json": json.dumps({"collective=allreduce": "a string"}),
        "abc.mpich.json": json.dumps(
            {"collective=allreduce": {"comm_type=intra": {"comm_size<=abc": {}}}}
        ),
        "huge.openmpi.rules": "1\n2 1\n2 99999999999999999999\n0 1 0 0\n",
    }
    for name, text in exports.items():
        (tmp / name).write_text(text)
    mpich_file = str(TABLE.parent / "reference-cpu-mpich-1node.mpich.json")
    verify = [*CLI, "verify-export", "--np", "2", "-m", "8:64", "--collectives", "allreduce"]
    verify += ["--launches", "2", "--budget", "0.05"]
    sweep = [*CLI, "sweep", "--np", "2", "-a", "native,ring", "-m", "8:64", "--budget", "0.05"]
    mpi2 = [MPIEXEC, "-n", "2", *CLI]
    triage = [*CLI, "triage"]
    return [
        Case(
            "compare A B --out A/results.csv",
            [*CLI, "compare", str(run), str(f["bom"]), "--out", f"{run}/results.csv"],
            keeps="run",
        ),
        Case(
            "tune RUN -o RUN/metadata.json",
            [*CLI, "tune", str(run), "-o", f"{run}/metadata.json"],
            keeps="run",
        ),
        Case(
            "tune RUN -o RUN/focus.json",
            [*CLI, "tune", str(run), "-o", f"{run}/focus.json"],
            keeps="run",
        ),
        Case(
            "bench -o RUN/results.csv (p=2)",
            [*mpi2, *BENCH, "-o", f"{run}/results.csv"],
            keeps="run",
        ),
        Case("bench -o an existing file (p=2)", [*mpi2, *BENCH, "-o", str(tmp / "existing.csv")]),
        Case("triage on a FIFO", [*triage, str(f["fifo"])]),
        Case("triage on a symlink to /dev/zero", [*triage, str(tmp / "zero.json")]),
        *[
            Case(
                f"triage on a bench file with a rank lag of {lag}",
                [*triage, str(_bench_file(tmp / f"lag-{lag}.json", lag))],
            )
            for lag in (float("inf"), -3.0, float("nan"))
        ],
        Case(
            "triage on linkmap's own -o record", [*triage, str(_linkmap_file(tmp / "map.json"))], 0
        ),
        Case("triage on a train-bench run directory", [*triage, str(trained)], keeps="trained"),
        Case(
            "triage on a node name holding a newline",
            [*triage, str(_bench_file(tmp / "newline.json", 900.0, "evil\nrank 9 is late"))],
            0,
        ),
        Case(
            "compare A B --table T (a table for p >= 64 only)",
            [*CLI, "compare", str(run), str(f["bom"]), "--table", str(tmp / "p64.json")],
            0,
        ),
        Case(
            "sweep --adaptive 6 -a ring,rabenseifner (no native)",
            [
                *CLI,
                "sweep",
                "--np",
                "2",
                "-a",
                "ring,rabenseifner",
                "--adaptive",
                "6",
                "-o",
                "adaptive",
            ],
        ),
        Case("sweep --spread -5 (minutes)", [*SWEEP, "--spread", "-5", "-o", "spread"]),
        Case(
            "sweep --spread 5 --launches 1 (nothing to spread)",
            [*SWEEP, "--spread", "5", "--launches", "1", "-o", "spread"],
        ),
        Case(
            "sweep --adaptive 4 --dry-run into a new directory",
            [
                *SWEEP,
                "--adaptive",
                "4",
                "--dry-run",
                "-o",
                "new",
            ],
            0,
        ),
        Case(
            "sweep --resume of an adaptive run with another --budget, --adaptive (focus kept)",
            ["sh", "-c", f"{resumed} && cmp -s {focus_file} {focus_file}.before"],
            0,
        ),
        Case(
            "sweep --resume with a focus.json size of 1e400",
            [*sweep, "--launches", "2", "--adaptive", "3", "--resume", "-o", str(overflow)],
            keeps="overflow",
        ),
        Case(
            "verify-export --omb whose osu_allreduce hangs (--client-timeout 3)",
            [
                *verify,
                "--omb",
                str(_client_dir(tmp / "omb-hang", "sleep 600")),
                "--client-timeout",
                "3",
                "-o",
                "v-hang",
                mpich_file,
            ],
        ),
        Case(
            "verify-export --omb whose client prints garbage",
            [
                *verify,
                "--omb",
                str(_client_dir(tmp / "omb-junk", "echo 299999999999999999999999999 nan")),
                "-o",
                "v-junk",
                mpich_file,
            ],
        ),
        Case(
            "verify-export into a half-written directory without --resume",
            [*verify, "--client", "none", "-o", str(half), mpich_file],
            keeps="half.verify",
        ),
        Case(
            "verify-export an Open MPI .rules file on MPICH",
            [*verify, "--client", "none", "-o", "v-rules", str(tmp / "t.openmpi.rules")],
        ),
        Case(
            "verify-export an .mpich.json naming an unknown algorithm",
            [*verify, "--client", "none", "-o", "v-unknown", str(tmp / "unknown.mpich.json")],
        ),
        *[
            Case(
                f"verify-export a malformed export ({name})",
                [*verify, "--client", "none", "-o", f"v-{name}", str(tmp / name)],
            )
            for name in ("string.mpich.json", "abc.mpich.json", "huge.openmpi.rules")
        ],
        Case(
            "MPI4PY_RC_THREAD_LEVEL=garbage (p=2)",
            ["env", "MPI4PY_RC_THREAD_LEVEL=garbage", *mpi2, *BENCH],
        ),
        Case(
            "bench linkmap --ranks-per-node 2 on 2 ranks",
            [*mpi2, "bench", "linkmap", "--ranks-per-node", "2"],
        ),
    ]


def _planted_runs(f: dict[str, Path]) -> None:
    """Copies of the small sweep with a heartbeat file of its next launch planted: a link
    to its own results.csv, and a FIFO (added to ``f`` by name)."""
    for name in ("beatlink", "beatfifo"):
        f[name] = f["run"].parent / name
        shutil.copytree(f["run"], f[name])
        folder = f[name] / "heartbeats" / "p2-3-mpi"
        folder.mkdir(parents=True)
        if name == "beatlink":
            (folder / "rank-0").symlink_to("../../results.csv")
        else:
            os.mkfifo(folder / "rank-0")


def _cluster_script(state: str, config: str, *args: str) -> list[str]:
    """cluster_local.sh ARGS with a state directory of the caller's own holding ``config``."""
    script = shlex.quote(str(REPO / "scripts" / "cluster_local.sh"))
    prepare = f"mkdir -p -m 700 {state} && printf {shlex.quote(config)} > {state}/config"
    run = f"OSU_DL_BENCH_CLUSTER_DIR=$PWD/{state} bash {script} {shlex.join(args)}"
    return ["sh", "-c", f"{prepare} && {run}"]


def _stall_cases(f: dict[str, Path]) -> list[Case]:
    """Careless input, fourth round: the cluster script, heartbeats, stalls, the planner."""
    _planted_runs(f)
    script = str(REPO / "scripts" / "cluster_local.sh")
    sweep = [*CLI, "sweep", "--np", "2", "-a", "native,ring", "-m", "8:64", "--budget", "0.05"]
    resume = [*sweep, "--launches", "3", "--resume", "-o"]
    foreign = "mkdir -p -m 700 dstate && printf 'link eth9-unrelated\\n' > dstate/created && "
    theirs = "mkdir -p -m 700 ostate && chown 65534 ostate && "
    matrix = [sys.executable, str(REPO / "scripts" / "validate_training_matrix.py")]
    matrix += ["--nprocs", "2", "--allreduce", "ring", "--bcast", "binomial", "--overlap", "on"]
    return [
        Case(
            "cluster_local.sh mpiexec with 'rate=1gbit; touch PWNED' in its config",
            _cluster_script("cstate", "nodes=2\nrate=1gbit; touch PWNED\n", "mpiexec", "true"),
            1,
        ),
        Case(
            "cluster_local.sh env with 'rate=1gbit; touch PWNED' in its config, eval'd",
            ["sh", "-c", 'lines=$("$@") || exit; eval "$lines"', "sh"]
            + _cluster_script("estate", "nodes=2\nrate=1gbit; touch PWNED\n", "env"),
            1,
        ),
        Case(
            "cluster_local.sh down with an unrelated link in its record",
            ["sh", "-c", f"{foreign}OSU_DL_BENCH_CLUSTER_DIR=$PWD/dstate bash {script} down"],
            0,
        ),
        Case(
            "cluster_local.sh env with a state directory of another user",
            ["sh", "-c", f"{theirs}OSU_DL_BENCH_CLUSTER_DIR=$PWD/ostate bash {script} env"],
            1,
        ),
        Case("cluster_local.sh up --nodes (no value)", ["bash", script, "up", "--nodes"], 1),
        Case(
            "cluster_local.sh up --nodes 2 --rate (no value)",
            ["bash", script, "up", "--nodes", "2", "--rate"],
            1,
        ),
        Case(
            "cluster_local.sh up --nodes 2 --slow node02=1mbit --dry-run (node2 shaped)",
            ["bash", script, "up", "--nodes", "2", "--slow", "node02=1mbit", "--dry-run"],
            0,
        ),
        Case(
            "cluster_local.sh up --nodes 2 --slow node08=1mbit",
            ["bash", script, "up", "--nodes", "2", "--slow", "node08=1mbit", "--dry-run"],
            1,
        ),
        Case(
            "a link to results.csv at a heartbeat file, then sweep --resume",
            [*resume, str(f["beatlink"])],
            0,
            keeps="beatlink",
            grows=True,
        ),
        Case(
            "a FIFO at a heartbeat file, then sweep --resume",
            [*resume, str(f["beatfifo"])],
            0,
            keeps="beatfifo",
            grows=True,
        ),
        Case("sweep --stall-timeout 1", [*sweep, "--stall-timeout", "1", "-o", "stall"]),
        Case("sweep --stall-timeout 0.001", [*sweep, "--stall-timeout", "0.001", "-o", "stall"]),
        Case(
            "OSU_DL_BENCH_DELAY_RANK=1:9.99 (p=2)",
            ["env", "OSU_DL_BENCH_DELAY_RANK=1:9.99", MPIEXEC, "-n", "2", *CLI, *BENCH],
        ),
        Case(
            "OSU_DL_BENCH_DELAY_RANK=1:4.9 (p=2), slept 5 s in all",
            [
                "env",
                "OSU_DL_BENCH_DELAY_RANK=1:4.9",
                MPIEXEC,
                "-n",
                "2",
                *CLI,
                *BENCH,
                "-m",
                "8:64",
            ],
            0,
        ),
        Case(
            "validate_training_matrix.py --run-dir vm1 (relative)",
            [*matrix, "--steps", "2", "--run-dir", "vm1"],
            0,
        ),
        *[
            Case(
                f"Ctrl-C {after} s into a sweep (the planner)",
                ["timeout", "--preserve-status", "-s", "INT", after, *sweep, "-o", "ctrlc"],
                130,
            )
            for after in ("0.5", "1.5")
        ],
    ]


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


@dataclass(frozen=True)
class Outcome:
    """How a case ended: the launcher's exit code (None: hung), each rank's, its first
    error line, and whether the run directory it names kept its results."""

    code: int | None
    ranks: str
    message: str
    kept: str


def _run(case: Case, timeout: float, cwd: Path, files: dict[str, Path]) -> Outcome:
    exits = Path(tempfile.mkdtemp(dir=cwd, prefix="exits-"))
    # Up to 3 ranks on this host's cores: MPICH's busy-polling collectives off.
    env = launch.mpi_environment(extra={**OVERSUBSCRIBED_CVARS, "EXITS": str(exits)})
    before = _results_bytes(files, case.keeps)
    try:
        done = launch.run(_recording(case.argv), timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        return Outcome(None, _rank_codes(exits), "", "?")
    out, err = done.stdout, done.stderr
    said = (err + out).splitlines()
    ours = [
        ln
        for ln in said
        if ln.startswith(("osu-dl-bench: error", "osu-dl-bench: warning", "# warning"))
    ]
    lines = ours or [ln for ln in said if "error" in ln.lower() or "FAIL" in ln]
    summary = [ln for ln in out.splitlines() if ln.startswith("SUMMARY")]
    after = _results_bytes(files, case.keeps)
    same = after == before or (case.grows and after is not None and after.startswith(before or b""))
    kept = "n/a" if before is None else ("yes" if same else "NO")
    ranks = _rank_codes(exits) if any(exits.iterdir()) else str(done.returncode)
    return Outcome(done.returncode, ranks, (summary or lines or [""])[0][:150], kept)


def _rank_codes(exits: Path) -> str:
    """Each rank's exit code, in rank order ('-' where a rank recorded none: killed)."""
    found = {int(p.name): p.read_text().strip() for p in exits.iterdir()}
    return ",".join(found.get(rank, "-") for rank in range(max(found, default=-1) + 1)) or "-"


def _results_bytes(files: dict[str, Path], name: str | None) -> bytes | None:
    return None if name is None else (files[name] / "results.csv").read_bytes()


def main() -> int:
    """Run the cases and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--only", default="", help="cases whose description holds this")
    args = parser.parse_args()
    bad = 0
    print(
        "| input | exit | each rank | expected | hung | results kept | message |\n"
        "|---|---|---|---|---|---|---|"
    )
    with tempfile.TemporaryDirectory() as tmp:
        files = {**_files(Path(tmp)), **_runs(Path(tmp))}
        cases = [
            *_cases(files),
            *_output_cases(files),
            # cluster, heartbeats, stalls, planner
            *_stall_cases(files),
        ]
        for case in (c for c in cases if args.only in c.what):
            got = _run(case, args.timeout, Path(tmp), files)
            bad += got.code != case.expect or got.kept == "NO"
            shown = got.message.replace("|", "\\|").encode("unicode_escape").decode()
            hung = "yes" if got.code is None else "no"
            print(
                f"| {case.what} | {got.code} | {got.ranks} | {case.expect} | {hung} | "
                f"{got.kept} | {shown} |",
                flush=True,
            )
        bad += (Path(tmp) / "PWNED").exists()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
