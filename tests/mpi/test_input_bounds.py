"""Hostile input is refused with a usage error naming what was expected: algorithm
parameters (wherever a variant is named), table and platform files, bench options, and
the clean command's choice of stale shared-memory segments."""

import os
import subprocess
import sys

import pytest
from support.files import fake_segment

from osu_dl_bench import jsonfile
from osu_dl_bench.model.platform import PlatformError, load_platform
from osu_dl_bench.selection.table import TableError, load_table

# --- algorithm parameters -----------------------------------------------------------------


ENTRY, RANGE1, POINT0 = ("entries", 0), ("entries", 0, "ranges", 1), ("entries", 0, "points", 0)


def _cli(*args):
    """osu-dl-bench in a fresh interpreter; also says whether MPI was loaded."""
    code = (
        "import sys\nfrom osu_dl_bench.cli import main\n"
        f"rc = main({list(args)!r})\n"
        "print('MPI loaded' if 'mpi4py.MPI' in sys.modules else 'no MPI')\nsys.exit(rc)"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_dry_run_lists_and_removes_nothing_and_needs_no_mpi(tmp_path):
    path = fake_segment(tmp_path)
    res = _cli("clean", "--dry-run", "--dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert f"would remove {path} (" in res.stdout and path.exists()
    assert res.stdout.rstrip().endswith("no MPI")
    res = _cli("clean", "--dir", str(tmp_path))
    assert res.returncode == 0 and f"removed {path} (" in res.stdout and not path.exists()


def test_clean_refuses_a_missing_directory_and_a_negative_age(tmp_path):
    res = _cli("clean", "--dir", str(tmp_path / "nothere"))
    assert res.returncode == 2 and "--dir" in res.stderr and "Traceback" not in res.stderr
    res = _cli("clean", "--min-age", "-1")
    assert res.returncode == 2 and "--min-age" in res.stderr


def test_a_fifo_is_not_read_as_a_table_or_platform(tmp_path):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    with pytest.raises(jsonfile.UnreadableJson, match="not a regular file"):
        jsonfile.load_json(fifo)
    with pytest.raises(TableError, match="not a regular file"):
        load_table(fifo)
    with pytest.raises(PlatformError, match="not a regular file"):
        load_platform(fifo)
    res = _cli("select", "--np", "2", "--size", "8", "--table", str(fifo))
    assert res.returncode == 2 and "not a regular file" in res.stderr, res.stderr
