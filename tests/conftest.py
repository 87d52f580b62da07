import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_sessionfinish(session, exitstatus):
    """Remove the MPICH segments that this suite's deliberately aborted and killed jobs left
    in /dev/shm (each holds memory until reboot): the suite's own `osu-dl-bench clean`."""
    from osu_dl_bench.commands import clean

    if clean.SHM_DIR.is_dir():
        clean.remove(clean.stale_segments(clean.SHM_DIR, os.getuid()))
