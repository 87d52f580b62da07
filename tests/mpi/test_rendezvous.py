"""A Gloo rendezvous that cannot connect (the store's address unreachable) ends a real job
within its timeout with one message and a non-zero exit on every rank, for the gloo
backend and for DDP-Gloo alike (collectives/backends/rendezvous.py). Each rank runs under
``sh -c`` that prints its own exit code, so every rank's is seen, not only mpiexec's."""

from __future__ import annotations

import importlib.util
import shlex
import sys
import time

import pytest
from mpirun import mpi_env, run_with_timeout

from collectives.backends.rendezvous import RENDEZVOUS_TIMEOUT_VARIABLE
from osu_dl_bench.jobs import launch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch not installed: pip install 'osu-dl-bench[train]'",
)
# TEST-NET-1 (RFC 5737): an address no host answers at.
UNREACHABLE = "192.0.2.1"
RENDEZVOUS_S = 3.0
# TCPStore tries a timed-out connect once more (2 x 3 s and a pause); start-up (torch's
# import, MPI, 3 ranks on 2 cores) takes up to a minute more on this shared machine; the
# default rendezvous timeout (minutes) would not end the job within this.
WITHIN_S = 120.0
TINY = ["--width", "4", "--image-size", "8", "--num-classes", "4", "-b", "4"]


def _every_rank(nprocs: int, argv: list[str]) -> tuple[list[int], str, float]:
    """Each rank's exit code, the job's stderr and its wall time, for ``python -m
    osu_dl_bench ARGV`` meeting at an unreachable store."""
    python = shlex.join([sys.executable, "-m", "osu_dl_bench", *argv])
    wrapped = ["sh", "-c", f'{python}; echo "rank exit $?"']
    cmd = [*launch.launcher_prefix(nprocs), *wrapped]
    env = mpi_env({"MASTER_ADDR": UNREACHABLE, RENDEZVOUS_TIMEOUT_VARIABLE: f"{RENDEZVOUS_S}"})
    start = time.monotonic()
    res = run_with_timeout(cmd, 180, env)
    codes = [int(line.split()[-1]) for line in res.stdout.splitlines() if "rank exit" in line]
    return codes, res.stderr, time.monotonic() - start


def _assert_one_message_on_every_rank(codes, stderr, seconds, nprocs):
    assert codes == [2] * nprocs, stderr[-3000:]
    assert stderr.count("osu-dl-bench: error:") == 1, stderr[-3000:]
    assert f"({UNREACHABLE})" in stderr or f"at {UNREACHABLE}:" in stderr, stderr[-3000:]
    assert "set MASTER_ADDR to an address of rank 0's host" in stderr
    assert seconds < WITHIN_S, f"the job took {seconds:.0f} s"


def test_an_unreachable_store_fails_the_gloo_backend_on_every_rank_with_one_message():
    bench = ["bench", "allreduce", "-a", "gloo", "-m", "8:64", "-i", "5", "-x", "1"]
    _assert_one_message_on_every_rank(*_every_rank(3, bench), 3)


def test_an_unreachable_store_fails_ddp_gloo_on_every_rank_with_one_message(tmp_path):
    worker = ["train-bench", "--worker", "--only", "ddp-gloo", "--rounds", "1", "--steps", "1"]
    worker += ["--warmup", "0", "--part", str(tmp_path / "part.json"), *TINY]
    _assert_one_message_on_every_rank(*_every_rank(2, worker), 2)
