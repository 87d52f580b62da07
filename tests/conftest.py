import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# tests/spmd runs inside the MPI jobs tests/mpi/test_spmd.py launches (one per process
# count), never in this process: see tests/spmd/conftest.py.
SPMD_JOB = bool(os.environ.get("OSU_DL_BENCH_SPMD"))
collect_ignore = [] if SPMD_JOB else ["spmd"]


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path_factory):
    """Launch-variance pools (selection.pools) go to a cache of the test's own, never the
    user's: a test's pool must not steer a real sweep, nor a real one a test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def registered(monkeypatch):
    """Every algorithm the tuning tests name is registered (stand-ins removed afterwards)."""
    # Imported here, not at start-up (scipy, pandas: seconds), which every rank of an SPMD
    # job pays.
    from support import tuning

    return tuning.register_stand_ins(monkeypatch)


@pytest.fixture
def winning_table(tmp_path):
    """A built table whose winners Open MPI and MPICH both have."""
    from support import exports

    return exports.winning_table(tmp_path)


def pytest_sessionfinish(session, exitstatus):
    """Remove the MPICH segments that this suite's deliberately aborted and killed jobs left
    in /dev/shm (each holds memory until reboot): the suite's own `osu-dl-bench clean`
    (once, by the session that launched the SPMD jobs, not by each of their ranks)."""
    if SPMD_JOB:
        return
    from osu_dl_bench.commands import clean

    if clean.SHM_DIR.is_dir():
        clean.remove(clean.stale_segments(clean.SHM_DIR, os.getuid()))
