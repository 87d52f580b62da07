"""The performance model: the CLI rejects bad input with exit 2, a real (tiny)
calibration job fits a platform, and the calibration a sweep's launch runs appends its
rows, which the fit reads (mpiexec, hard timeouts)."""

import json
import subprocess
import sys

import pandas as pd
import pytest
from mpirun import mpi_env, run_mpi, run_with_timeout

from osu_dl_bench.measurement.calibration import KINDS
from osu_dl_bench.model.platform import (
    load_platform,
)
from osu_dl_bench.model.platform_fit import fit_platform
from osu_dl_bench.selection.table import load_table

ALPHA, BETA, GAMMA, OVERHEAD = 2e-6, 1e-10, 5e-11, 1e-6


def _cli(*args: str, timeout: float = 60):
    return run_with_timeout([sys.executable, "-m", "osu_dl_bench", "model", *args], timeout)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["predict", "--np", "0", "--platform", "ib-hdr200"], "--np: expected a process count"),
        (["predict", "--np", "8", "--platform", "no/such.json"], "no such file"),
        (
            ["predict", "--np", "8", "--platform", "ib-hdr200", "--collectives", "x"],
            "--collectives",
        ),
        (["predict", "--np", "8"], "--platform"),
        (["fit", "no/such/dir", "--np", "2,1"], "--np '2,1': expected process counts >= 2"),
    ],
)
def test_cli_bad_input_exits_2_with_a_clear_message(args, message):
    result = _cli(*args)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_cli_fit_then_predict_across_nodes_needs_an_interconnect(tmp_path):
    """A real calibration job (2 ranks, tiny sizes), then predictions from its platform."""
    run = tmp_path / "run"
    fit = run_with_timeout(
        [
            sys.executable,
            "-m",
            "osu_dl_bench",
            "model",
            "fit",
            str(run),
            "-m",
            "8:256K",
            "--rounds",
            "1",
        ],
        90,
        mpi_env(),
    )
    assert fit.returncode == 0, fit.stdout + fit.stderr
    platform = load_platform(run)
    assert platform.intra.at(8)[0] > 0 and platform.cores_per_node
    across = _cli("predict", "--np", "16", "--ppn", "8", "--platform", str(run), "-m", "1K")
    assert across.returncode == 2 and "--inter" in across.stderr
    out = tmp_path / "t.json"
    ok = _cli(
        "predict",
        "--np",
        "16",
        "--ppn",
        "8",
        "--platform",
        str(run),
        "--inter",
        "ib-edr100",
        "-m",
        "1K:4K",
        "-o",
        str(out),
    )
    assert ok.returncode == 0, ok.stderr
    assert load_table(out).header["provenance"]["predicted"] is True


def test_a_closed_output_pipe_ends_quietly():
    # `osu-dl-bench ... | head`: the reader goes away; no traceback, no hang, exit 1.
    cmd = [sys.executable, "-m", "osu_dl_bench", "model", "predict", "--np", "1024"]
    cmd += ["--ppn", "8", "--platform", "ib-hdr200", "-m", "8:256M"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before the first line is written
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("model predict hung on a closed pipe") from None
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr


# What a sweep's launch does: run_calibration on its communicator, labelled by launch;
# tiny sizes and one short round, so the test takes seconds.
IN_LAUNCH = """
import sys
from pathlib import Path
from osu_dl_bench.jobs.entry import run_in_job
from osu_dl_bench.measurement.calibration import Effort, run_calibration

def body(comm):
    for launch in (1, 2):
        label = f"p{comm.Get_size()}-launch{launch}"
        run_calibration(comm, Path(sys.argv[1]), label, (8, 512, 4096, 65536), Effort(1, 1e-4, 1))
    return 0

raise SystemExit(run_in_job(body))
"""


def test_a_launchs_calibration_appends_its_rows_and_the_fit_reads_them(tmp_path):
    result = run_mpi(2, ["-c", IN_LAUNCH, str(tmp_path)], timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    frame = pd.read_csv(tmp_path / "calibration.csv")
    assert set(frame["job"]) == {"p2-launch1", "p2-launch2"}
    assert set(frame["kind"]) == set(KINDS)
    assert (frame["nprocs"] == 2).all() and (frame["median_s"] > 0).all()
    references = frame[frame["kind"].str.startswith("ref_")]
    assert len(references) == 4 and (references["size_bytes"] == 0).all()
    jobs = json.loads((tmp_path / "calibration.json").read_text())["jobs"]
    assert [job["job"] for job in jobs] == ["p2-launch1", "p2-launch2"]
    platform, _ = fit_platform(tmp_path)
    assert platform.states[0].reference.copy_s > 0 and platform.intra.at(8)[0] > 0
