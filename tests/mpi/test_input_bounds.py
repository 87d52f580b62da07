"""Hostile input is refused with a usage error naming what was expected: algorithm
parameters (wherever a variant is named), table and platform files, bench options, and
the clean command's choice of stale shared-memory segments."""

import subprocess
import sys

from support.files import fake_segment

# --- algorithm parameters -----------------------------------------------------------------


ENTRY, RANGE1, POINT0 = ("entries", 0), ("entries", 0, "ranges", 1), ("entries", 0, "points", 0)


def _clean_cli(*args):
    """osu-dl-bench clean in a fresh interpreter; also says whether MPI was loaded."""
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
    res = _clean_cli("clean", "--dry-run", "--dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert f"would remove {path} (" in res.stdout and path.exists()
    assert res.stdout.rstrip().endswith("no MPI")
    res = _clean_cli("clean", "--dir", str(tmp_path))
    assert res.returncode == 0 and f"removed {path} (" in res.stdout and not path.exists()


def test_clean_refuses_a_missing_directory_and_a_negative_age(tmp_path):
    res = _clean_cli("clean", "--dir", str(tmp_path / "nothere"))
    assert res.returncode == 2 and "--dir" in res.stderr and "Traceback" not in res.stderr
    res = _clean_cli("clean", "--min-age", "-1")
    assert res.returncode == 2 and "--min-age" in res.stderr
